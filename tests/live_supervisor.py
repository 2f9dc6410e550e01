"""The real supervisor in process, launching the torch-free fake trainer, for console and CLI
tests of behaviour (what a request does to a run).

``LiveRun`` starts a run and waits until its trainer reports (state "running"). A real run
ends by closing its connections once its consoles have the final events; ``LingeringSupervisor``
holds it open after ``run_ended`` until the test closes it, so a console can still read an
ended run. ``live_env`` sets the fake trainer's pace and this checkout's path for it; ``live_in_thread``
serves a run for synchronous code (the CLI).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.alerts import watch as alert_watch
from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.supervisor.daemon import Supervisor
from engine.supervisor.trainers.trainer_process import TrainerExit
from engine.wire.protocol import DirectiveView, Ok, Propose
from memtui.client import Request, _request_once, new_request_id
from tests.waiting import until

CHECKOUT = str(Path(__file__).resolve().parents[1])
FAKE_TRAINER = Path(__file__).resolve().parent / "fakes" / "fake_trainer.py"
FAKE_TRAINER_ENV = {"FAKE_TRAINER_RATE_HZ": "20", "FAKE_TRAINER_STEPS": "100000"}
"""The fake trainer's pace (steps per second: enough for a test to see steps, few enough that a
console drawing each one leaves the shared CI machine's CPU to the test) and length (it runs
until stopped)."""
RUN_CONFIG = {"restart": {"backoff_initial_s": 0.05}, "policy": {"max_staleness_steps": 10**9}}
"""The real run's config: a short restart backoff (s), so a kill's restart comes soon; no
directive goes stale while a test's operator decides (500 steps are 25 s of the fake trainer)."""
TIMEOUT_S = 30.0  # s any one awaited condition may take before the test fails (a shared CI machine)


def live_env(monkeypatch: pytest.MonkeyPatch, **trainer: Any) -> None:
    """The fake trainer's environment (``FAKE_TRAINER_<NAME>`` for each of ``trainer``), this
    checkout first on its path, and no doctor report in the first hour (a test's run is short)."""
    for name, value in FAKE_TRAINER_ENV.items():
        monkeypatch.setenv(name, value)
    for name, value in trainer.items():
        monkeypatch.setenv(f"FAKE_TRAINER_{name.upper()}", str(value))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(alert_watch, "FIRST_DOCTOR_S", 3600.0)


class LingeringSupervisor(Supervisor):
    """A real supervisor that, once its run ended, keeps serving until ``release`` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()

    async def _finish(self, outcome: TrainerExit) -> None:
        await super()._finish(outcome)
        await self.release.wait()


class LiveRun:
    """A run served by the real supervisor on this test's event loop."""

    def __init__(self, home: Path, config: dict[str, Any] | None = None, **options: Any) -> None:
        self.run = RunDir.create(build_run_config(config or RUN_CONFIG, steps=100, **options), home=home)
        self.supervisor = LingeringSupervisor(self.run, [sys.executable, str(FAKE_TRAINER)])

    async def start(self) -> LiveRun:
        """Serving, and the trainer's first step reported."""
        self.task = asyncio.create_task(self.supervisor.serve())
        await until(
            lambda: self.supervisor.serving.is_set() or self.task.done(), timeout=TIMEOUT_S, what="the socket"
        )
        if self.task.done():
            self.task.result()  # raises what went wrong
        await until(lambda: self.supervisor.state == "running", timeout=TIMEOUT_S, what="the first step")
        return self

    async def request(self, message: Request) -> Ok:
        """``message`` sent as the CLI sends it, on a connection of its own; the Ok it got."""
        return await _request_once(self.run.socket, message, TIMEOUT_S)

    async def propose(self, **values: Any) -> str:
        """An operator's directive of ``values``, pending once the policy judged it: its id."""
        answer = await self.request(Propose(id=new_request_id(), values=values, rationale="test"))
        return str(answer.result["directive"]["id"])

    def directive(self, directive_id: str) -> DirectiveView:
        """The supervisor's own view of a directive (its state, allowed values, reasons)."""
        queue = self.supervisor.directives
        assert queue is not None, "the supervisor has no directive queue yet"
        return queue.entries[directive_id].view()

    async def close(self) -> None:
        if not hasattr(self, "task"):
            return
        self.supervisor.release.set()
        if not self.supervisor.journal.ended:
            self.task.cancel()  # its cleanup kills the trainer
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self.task, TIMEOUT_S)


@contextlib.contextmanager
def live_in_thread(home: Path, config: dict[str, Any] | None = None) -> Iterator[LiveRun]:
    """A started ``LiveRun`` on a private event loop in a thread (for synchronous callers such
    as the CLI); closed, its trainer gone, on leaving."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    live = LiveRun(home, config)
    try:
        asyncio.run_coroutine_threadsafe(live.start(), loop).result(TIMEOUT_S * 2)
        yield live
    finally:
        asyncio.run_coroutine_threadsafe(live.close(), loop).result(TIMEOUT_S * 2)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(TIMEOUT_S)
        loop.close()
