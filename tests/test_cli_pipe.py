"""``memtui export | head``: a reader that leaves early is not an error (exit 0, no traceback)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import MEMTUI, throwaway_home
from fakes.run_script import make_sample

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store

pytestmark = pytest.mark.slow  # starts real processes (tests/conftest.py)


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtp")


def test_export_into_a_closed_pipe_ends_quietly(home: Path) -> None:
    run = RunDir.create(build_run_config({"name": "pipe"}), home=home)
    with Store(run.store) as store:
        for step in range(1, 5001):  # ~2 MB of JSON lines: far more than a pipe buffer
            store.add_step(make_sample(step, ts=1000.0 + step))
    proc = subprocess.Popen(
        [MEMTUI, "export", run.run_id, "--format", "jsonl"],
        env={**os.environ, "MEMTUI_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.read(100)
    proc.stdout.close()  # like `head -c 100`
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None and proc.stderr.read() == b""
