"""Driving the real ``memtui`` CLI from tests: a throwaway home, the command, waiting.

Shared by the end-to-end tests (tests/test_e2e.py, test_directives_e2e.py, test_recovery.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.run.directory import list_runs, pid_alive
from engine.run.store import Store

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"


def throwaway_home(prefix: str) -> Iterator[Path]:
    """A short MEMTUI_HOME (socket paths fit in 107 bytes); every engine in it is killed after."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    yield path
    for run in list_runs(path):  # never leave a detached engine behind
        try:
            with Store(run.store, readonly=True) as store:
                trainer = store.read_meta().trainer_pid
        except Exception:
            trainer = None
        for pid in (run.supervisor_pid(), trainer):
            if pid and pid_alive(pid):
                os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def memtui(
    home: Path, *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``memtui ARGS`` with ``MEMTUI_HOME=home``; output captured as text."""
    full_env = {**os.environ, "MEMTUI_HOME": str(home), **(env or {})}
    return subprocess.run([MEMTUI, *args], env=full_env, capture_output=True, text=True, timeout=timeout)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every_s: float = 0.25) -> Any:
    """Poll until ``predicate()`` is truthy and return it; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
