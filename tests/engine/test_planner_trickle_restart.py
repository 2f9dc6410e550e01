"""A planner endpoint that trickles its reply never delays the supervisor's restart.

The real supervisor runs the fake trainer with ``policy.planner = "openai"`` pointing at an
endpoint that sends its headers and then a few bytes a second, forever
(tests.fakes.trickle_endpoint). The trainer is SIGKILLed once the planner has been asked
twice: the supervisor restarts it and the new trainer steps, every ask the endpoint saw is
stored as a refusal naming the deadline (the skipped ones as refusals saying why), and
the planner's failing is a warning alert. The loop's default executor is made small (two
workers, where the default is min(32, CPUs + 4)): a planner that held a worker thread
per ask would fill it after two asks, and the restart decision (which reads the
checkpoints in that executor) would wait behind them.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from tests.fakes.trickle_endpoint import TrickleEndpoint
from tests.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TIMEOUT_S = 1.0  # the planner's deadline; the endpoint sends a byte every 0.2 s, so no
# read ever waits that long: only a deadline on the whole exchange ends an ask
SOURCE = "http:trickle-model"


@pytest.fixture
async def trickle() -> AsyncIterator[TrickleEndpoint]:
    async with TrickleEndpoint(interval_s=0.2, max_bytes=3000) as endpoint:  # 10 min at most
        yield endpoint


@pytest.fixture
def run(home: Path, trickle: TrickleEndpoint) -> RunDir:
    """Overrides conftest's run: an OpenAI-compatible planner at the trickling endpoint."""
    policy = {
        "planner": "openai",
        "planner_url": trickle.url,
        "planner_model": "trickle-model",
        "planner_timeout_s": TIMEOUT_S,
        "planner_every_steps": 10,
    }
    config = build_run_config({"steps": 100_000, "policy": policy, "restart": {"backoff_initial_s": 0.1}})
    return RunDir.create(config, home=home)


def stored(run: RunDir) -> tuple[list[Any], list[Any]]:
    """(events, the planner's decisions) in the store now."""
    with Store(run.store, readonly=True) as store:
        return store.events_since(0), [d for _, d in store.decisions() if d.source == SOURCE]


async def test_a_sigkilled_trainer_is_restarted_while_the_planner_trickles(
    run: RunDir, start: Any, trickle: TrickleEndpoint, fake_env: Any
) -> None:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
    supervisor = (await start()).supervisor
    await until(
        lambda: trickle.connections >= 2 and supervisor.attempts.pid is not None,
        timeout=60,
        what="two asks to the trickling endpoint",
        seen=lambda: (trickle.connections, supervisor.latest),
    )
    first = supervisor.attempts.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await until(
        lambda: supervisor.latest is not None and supervisor.latest.attempt == 2,
        timeout=60,
        what="a step of the restarted trainer",
        seen=lambda: (supervisor.latest, supervisor.state, trickle.connections),
    )

    def deadline_refusals() -> list[Any]:
        return [d for d in stored(run)[1] if "no reply within" in d.reasons[0]]

    # Decisions are batched (flushed every 0.5 s); an ask may be in flight: wait for a
    # moment when every ask the endpoint saw is stored.
    await until(
        lambda: len(deadline_refusals()) == trickle.connections,
        timeout=60,
        what="a refusal stored for every ask",
        seen=lambda: (len(deadline_refusals()), trickle.connections),
    )
    events, decisions = stored(run)
    assert [e.data["cause"] for e in events if e.type == "trainer_restarted"] == ["killed by SIGKILL"]
    assert all(d.state == "rejected" for d in decisions)
    for decision in decisions:
        reason = decision.reasons[0]
        assert reason.startswith("planner output refused: "), reason
        assert f"no reply within {TIMEOUT_S:g} s" in reason or "not asked: " in reason, reason
    alerts = [e for e in events if e.type == "alert" and e.data["rule"] == "planner"]
    assert alerts and alerts[0].severity == "warning" and alerts[0].data["state"] == "firing"
