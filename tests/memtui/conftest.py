"""Fixtures for the console and CLI tests: a short MEMTUI_HOME, fabricated runs, a live run
of the real supervisor (in process, with the fake trainer)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from tests.live_supervisor import LiveRun, live_env


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short MEMTUI_HOME (Unix socket paths must stay under 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))
    monkeypatch.setenv("MEMTUI_HOME", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run_dir(home: Path) -> RunDir:
    """A fresh run directory with run.json (100 steps), no store, no supervisor."""
    return RunDir.create(build_run_config(name="demo", steps=100), home)


@pytest.fixture
def live_run(run_dir: RunDir) -> RunDir:
    """``run_dir`` whose supervisor.pid names this (live) test process."""
    run_dir.pid_file.write_text(str(os.getpid()))
    return run_dir


@pytest.fixture
async def live(home: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LiveRun]:
    """A run of the real supervisor with the fake trainer, stepping (``tests.live_supervisor``)."""
    live_env(monkeypatch)
    run = LiveRun(home)
    try:
        yield await run.start()
    finally:
        await run.close()


@pytest.fixture(autouse=True)
def prompt_redraws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pilot tests wait for new data to be drawn; the console's own rate limit
    (REDRAW_INTERVAL_S, 0.5 s, sized for CPU in bench/console_live.py) would make each wait
    up to that long. Drawing is the same code at any rate; only the wait between two draws is
    shorter here."""
    import memtui.console.main_screen

    monkeypatch.setattr(memtui.console.main_screen, "REDRAW_INTERVAL_S", 0.1)
