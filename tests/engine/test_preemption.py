"""Preemption: SIGTERM to the trainer (a spot reclaim) ends or restarts the run, as configured."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from tests.waiting import is_event

pytestmark = pytest.mark.slow  # starts real processes (tests/conftest.py)


async def preempt_first_trainer(start, connect, restart: dict[str, Any], run: RunDir) -> tuple[Any, Any]:
    run.write_config(build_run_config(steps=100000, restart=restart))
    running = await start()
    client = await connect(replay_from=0)
    launched, _ = await client.until(is_event("trainer_launched"))
    await client.until(is_event("trainer_started"))
    os.kill(launched.event.data["pid"], signal.SIGTERM)  # what a preempting host sends
    return running, client


@pytest.mark.parametrize("restart_on_preemption", [True, False])
async def test_sigterm_to_the_trainer_restarts_only_when_asked(
    run: RunDir, start, connect, fake_env, restart_on_preemption: bool
) -> None:
    restart = {"on_preemption": restart_on_preemption, "backoff_initial_s": 0.1}
    running, client = await preempt_first_trainer(start, connect, restart, run)
    if restart_on_preemption:
        restarted, _ = await client.until(is_event("trainer_restarted"))
        assert restarted.event.data["cause"] == "preempted: stopped itself on a signal"
        await client.until(is_event("trainer_started", attempt=2))
        running.supervisor.request_stop("test over")
    assert await running.result() == 0
    with Store(run.store, readonly=True) as store:
        meta = store.read_meta()
        kinds = [e.type for e in store.events_since(0)]
    assert meta.state == "stopped"
    assert kinds.count("trainer_started") == (2 if restart_on_preemption else 1)
    assert ("trainer_restarted" in kinds) is restart_on_preemption


async def test_a_preemption_that_ends_the_run_says_so(run: RunDir, start, connect, fake_env) -> None:
    running, _ = await preempt_first_trainer(start, connect, {"on_preemption": False}, run)
    assert await running.result() == 0
    with Store(run.store, readonly=True) as store:
        (ended,) = [e for e in store.events_since(0) if e.type == "run_ended"]
    assert ended.data["state"] == "stopped"
    assert ended.data["reason"].startswith("preempted:") and "on_preemption is false" in ended.data["reason"]
