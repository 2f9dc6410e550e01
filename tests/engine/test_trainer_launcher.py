"""Forking trainers from the launcher thread: a launch cancelled while the fork is under way
(the supervisor shutting down) leaves no process running."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
from typing import Any

import pytest

from engine.supervisor.trainers import trainer_launcher
from engine.supervisor.trainers.trainer_launcher import launch
from tests.waiting import until

pytestmark = pytest.mark.slow  # starts real processes (tests/conftest.py)


async def test_a_cancelled_launch_kills_what_it_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    forked: list[subprocess.Popen[Any]] = []
    entered, cancelled = threading.Event(), threading.Event()

    class Recorded(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            entered.set()  # the launcher thread is forking now
            cancelled.wait(timeout=30)  # ... and is still at it when the launch is cancelled
            super().__init__(*args, **kwargs)
            forked.append(self)

    monkeypatch.setattr(trainer_launcher.subprocess, "Popen", Recorded)
    task = asyncio.create_task(launch(["sleep", "60"], start_new_session=True))
    await until(entered.is_set, timeout=30, what="the launcher thread forking")
    task.cancel()
    cancelled.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    (proc,) = await until(lambda: forked, timeout=30, what="the fork")
    await until(lambda: proc.poll() is not None, timeout=30, what="the forked process killed")
    assert proc.returncode == -signal.SIGKILL


async def test_a_launch_that_completes_gives_the_process() -> None:
    proc = await launch(["sh", "-c", "exit 3"])
    assert await proc.wait() == 3 and proc.returncode == 3
