"""A stuck run: a trainer stopped with SIGSTOP raises the heartbeat alert, which collects its
stacks (and leaves it stopped), and SIGCONT resolves it. When exactly it fires (``no_step_s``
after the last step, not before) is the rules' unit test with a driven clock (test_alert_rules.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.supervisor.hangs.stack_collection import is_stopped
from tests.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
NO_STEP_S = 1.0


@pytest.fixture
def run(home: Path) -> RunDir:
    config = build_run_config({"alerts": {"no_step_s": NO_STEP_S, "hardware_interval_s": 0.5}}, steps=100)
    return RunDir.create(config, home=home)


async def test_sigstopped_trainer_raises_heartbeat_alert(run: RunDir, start, connect, fake_env) -> None:
    fake_env(rate_hz=50)
    running = await start()
    client = await connect()
    await client.until(lambda m: m.kind == "telemetry")
    pid = running.supervisor.attempts.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        alert, _ = await client.until(
            lambda m: (
                m.kind == "event" and m.event.type == "alert" and m.event.data.get("rule") == "heartbeat"
            ),
            timeout=30,
        )
        assert alert.event.severity == "critical" and "no step" in alert.event.message
        assert alert.event.data["state"] == "firing"
        stacks, _ = await client.until(lambda m: m.kind == "event" and m.event.type == "stacks_collected")
        assert stacks.event.data["rule"] == "heartbeat" and stacks.event.data["stopped"] == [0]
        assert "tests/fakes/fake_trainer.py" in stacks.event.data["where"]["0"]
        await until(lambda: is_stopped(pid), what="the trainer stopped again, as it was found")
        assert not [e for e in running.supervisor.store.events_since(0) if e.type == "trainer_hung"]
        dump = (run.path / stacks.event.data["files"]["0"]).read_text()
        assert "most recent call first" in dump and "stacks of 1 of 1 ranks" in stacks.event.message
        os.kill(pid, signal.SIGCONT)

        def resolved() -> list[str]:  # from the store: it may have come while the dump ran
            events = running.supervisor.store.events_since(alert.event.seq)
            return [e.data["rule"] for e in events if e.type == "alert" and e.data.get("state") == "resolved"]

        assert await until(resolved, timeout=30, what="the heartbeat alert resolved") == ["heartbeat"]
    finally:
        os.kill(pid, signal.SIGCONT)  # the fixture's teardown kills it; a stopped one would linger


async def test_doctor_report_recorded_at_start(run: RunDir, start, connect, fake_env) -> None:
    await start()
    client = await connect(replay_from=0)
    report, _ = await client.until(lambda m: m.kind == "event" and m.event.type == "doctor_report")
    assert report.event.data["verdict"] in ("healthy", "degraded", "unhealthy")
    assert report.event.data["hardware"]["host"]["processes"]
