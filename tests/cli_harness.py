"""Driving the real ``memtui`` CLI from tests: a throwaway home and the command.

Shared by the end-to-end tests (tests/test_e2e.py, test_directives_e2e.py, test_recovery.py);
they wait with ``tests.waiting``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from engine.run.directory import list_runs, pid_alive
from engine.run.storage.store import Store

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"
CHECKOUT = str(Path(__file__).resolve().parents[1])
"""The repository these tests belong to: the CLI they start imports its code first."""


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


def cli_environment(home: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``MEMTUI_HOME=home``, ``env`` and the checkout first on
    ``PYTHONPATH``: the ``memtui`` script may belong to an install of another checkout."""
    path = os.pathsep.join(p for p in (CHECKOUT, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "MEMTUI_HOME": str(home), **(env or {})}


def memtui(
    home: Path, *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``memtui ARGS`` with ``MEMTUI_HOME=home``; output captured as text."""
    full_env = cli_environment(home, env)
    return subprocess.run([MEMTUI, *args], env=full_env, capture_output=True, text=True, timeout=timeout)
