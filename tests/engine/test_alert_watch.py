"""The supervisor's side of alerts: the user's alert command (a webhook script)
gets each alert as JSON, readings are taken off the event loop, a failing tick does not stop
the timer, a restart raises an alert, and the policy reads the doctor's periodic report."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.alerts import watch as alert_watch
from engine.alerts.watch import AlertWatch, run_alert_command
from engine.config.config_file import build_run_config
from engine.config.run_config import AlertConfig
from engine.domain import Event
from engine.run.directory import RunDir
from engine.wire.protocol import Propose
from tests.fakes.event_log import EventLog
from tests.fakes.fake_nvml import FakeNvml, healthy_gpu
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)


def appender(path: Path, delay_s: float = 0.0) -> str:
    """An alert command that appends its stdin, one line per alert, to ``path`` (after
    ``delay_s``: a slow webhook)."""
    code = (
        f"import sys, time; time.sleep({delay_s}); open({str(path)!r}, 'a').write(sys.stdin.read() + '\\n')"
    )
    return shlex.join([sys.executable, "-c", code])


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


class Recorder(EventLog):
    """The journal's stand-in, with the alert rules it saw."""

    def rules(self) -> list[str]:
        return [str(e.data.get("rule")) for e in self.events if e.type == "alert"]


def watch(
    tmp_path: Path,
    record: Recorder,
    nvml: Any = None,
    expecting: bool | Callable[[], bool] = True,
    ops_delay_s: float | None = alert_watch.OPS_SURVEY_DELAY_S,
    share_cores: Callable[[int], None] = lambda cores: None,
    **config: Any,
) -> AlertWatch:
    return AlertWatch(
        AlertConfig(**config),
        record,
        run_dir=tmp_path,
        checkpoint_dir=tmp_path / "checkpoints",
        pids=lambda: {"supervisor": os.getpid()},
        expecting_steps=expecting if callable(expecting) else lambda: expecting,
        nvml=nvml,
        ops_delay_s=ops_delay_s,
        share_cores=share_cores,
    )


@pytest.mark.slow
async def test_alert_command_gets_the_payload_as_json_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "hook.ndjson"
    assert await run_alert_command(appender(out), {"rule": "disk_low", "state": "firing"}, 20.0) == 0
    assert lines_of(out) == [{"rule": "disk_low", "state": "firing"}]


@pytest.mark.slow
async def test_alert_command_that_hangs_is_killed_and_one_that_cannot_start_is_none() -> None:
    # Killed at its timeout, not waited for: waiting would outlast the test's own timeout.
    assert await run_alert_command("sleep 1000", {}, 0.3) is None
    assert await run_alert_command("/no/such/alert-hook", {}, 5.0) is None
    assert await run_alert_command("unbalanced 'quote", {}, 5.0) is None


@pytest.mark.slow
async def test_a_failing_alert_command_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="engine.alerts.watch"):
        assert await run_alert_command("false", {"rule": "heartbeat"}, 5.0) == 1
    assert "exited with status 1" in caplog.text


@pytest.mark.slow
async def test_each_alert_runs_the_command_with_the_stored_event(tmp_path: Path) -> None:
    out, record = tmp_path / "hook.ndjson", Recorder()
    w = watch(tmp_path, record, command=appender(out), command_timeout_s=20.0)
    w.on_restart("killed by SIGKILL, restart 1", {"cause": "killed by SIGKILL"})
    await w.close()  # waits for the commands in flight
    (payload,) = lines_of(out)
    assert payload["seq"] == record.events[0].seq and payload["type"] == "alert"
    assert payload["data"] == {"rule": "restart", "state": "firing", "cause": "killed by SIGKILL"}
    assert payload["severity"] == "warning" and "trainer restarted" in payload["message"]


class ThreadNoting(FakeNvml):
    """A fake NVML that notes which thread each call came from."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threads: set[int] = set()

    def _call(self, name: str) -> None:
        self.threads.add(threading.get_ident())
        super()._call(name)


async def test_nvml_readings_are_taken_off_the_event_loop(tmp_path: Path) -> None:
    nvml, record = ThreadNoting([healthy_gpu(), healthy_gpu()]), Recorder()
    w = watch(tmp_path, record, nvml)
    await w._doctor()  # the doctor report: software survey and hardware reading
    await w._hardware()  # a periodic hardware reading
    assert nvml.calls and nvml.threads and threading.get_ident() not in nvml.threads
    assert [e.type for e in record.events] == ["doctor_report"]
    assert w.latest is not None and len(w.latest.gpus) == 2


async def test_a_failing_tick_does_not_stop_the_alerts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(alert_watch, "FIRST_DOCTOR_S", 0.0)
    monkeypatch.setattr(alert_watch, "TICK_S", 0.02)
    record = Recorder(fail_first=1)  # the first record (the doctor report) fails: disk full
    w = watch(tmp_path, record, no_step_s=0.2, hardware_interval_s=0.05)
    w.trainer_launched()
    task = asyncio.create_task(w.run())
    try:
        await until(
            lambda: "heartbeat" in record.rules() or task.done(),
            what="the heartbeat alert after a failed tick",
            seen=record.rules,
        )
        assert not task.done(), task.exception()
        assert "heartbeat" in record.rules()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_op_survey_runs_once_and_every_later_report_carries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.doctor.deepspeed_ops import OpStatus, OpSurvey

    surveys: list[float] = []

    async def fake_survey() -> OpSurvey:
        surveys.append(time.monotonic())
        return OpSurvey(
            accelerator="cpu", ninja=True, ops={"cpu_adam": OpStatus(installed=False, compatible=True)}
        )

    monkeypatch.setattr(alert_watch, "survey_ops_async", fake_survey)
    monkeypatch.setattr(alert_watch, "FIRST_DOCTOR_S", 0.0)
    monkeypatch.setattr(alert_watch, "TICK_S", 0.02)
    record = Recorder()
    w = watch(tmp_path, record, expecting=False, ops_delay_s=0.1, doctor_interval_s=0.1)
    task = asyncio.create_task(w.run())
    try:
        reports: list[Event] = await until(
            lambda: len(found := [e for e in record.events if e.type == "doctor_report"]) >= 6 and found,
            what="six doctor reports",
            seen=lambda: [e.type for e in record.events],
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    compat = [r.data["software"]["deepspeed_compatible"] for r in reports]
    assert len(surveys) == 1  # slow: once, not at every periodic report
    assert compat[0] == {}  # the first report does not wait for it (the trainer's start comes first)
    first_with = next(i for i, c in enumerate(compat) if c)
    assert all(c == {"cpu_adam": True} for c in compat[first_with:])


async def test_a_new_supervisor_of_the_run_reads_the_survey_its_predecessor_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole-tree kill's new supervisor: the survey (torch and DeepSpeed imported in a child,
    seconds of the trainer's cores) is not run again in the same environment; its record
    is read at once. Another environment (a different torch) surveys afresh."""
    from engine.doctor import op_survey_record
    from engine.doctor.deepspeed_ops import OpStatus, OpSurvey

    surveys: list[float] = []

    async def fake_survey() -> OpSurvey:
        surveys.append(time.monotonic())
        return OpSurvey(accelerator="cpu", ops={"cpu_adam": OpStatus(installed=False, compatible=True)})

    monkeypatch.setattr(alert_watch, "survey_ops_async", fake_survey)
    monkeypatch.setattr(alert_watch, "FIRST_DOCTOR_S", 0.0)
    monkeypatch.setattr(alert_watch, "TICK_S", 0.02)

    async def supervisor_reports(delay_s: float) -> dict[str, Any]:
        record = Recorder()
        w = watch(tmp_path, record, expecting=False, ops_delay_s=delay_s, doctor_interval_s=0.05)
        task = asyncio.create_task(w.run())
        try:
            found = await until(
                lambda: [
                    e
                    for e in record.events
                    if e.type == "doctor_report" and e.data["software"]["deepspeed_compatible"]
                ],
                what="a doctor report with the op survey",
                seen=lambda: [e.type for e in record.events],
            )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return dict(found[0].data["software"]["deepspeed_compatible"])

    assert await supervisor_reports(0.05) == {"cpu_adam": True} and len(surveys) == 1
    assert (tmp_path / op_survey_record.RECORD_NAME).exists()
    assert await supervisor_reports(3600.0) == {"cpu_adam": True}  # read at once, not in an hour
    assert len(surveys) == 1
    key = op_survey_record.environment_key()
    monkeypatch.setattr(op_survey_record, "environment_key", lambda: {**key, "torch": "0.0-other"})
    monkeypatch.setattr(alert_watch, "environment_key", op_survey_record.environment_key)
    assert await supervisor_reports(0.05) == {"cpu_adam": True} and len(surveys) == 2


@pytest.mark.parametrize("fails", [False, True])
async def test_the_op_survey_borrows_a_core_from_training_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    """Its child imports torch and DeepSpeed beside training (seconds of a core): the trainer
    is asked to leave a core for exactly that long, and takes it back even when it fails."""
    from engine.doctor.deepspeed_ops import OpSurvey

    shares: list[int] = []
    during: list[list[int]] = []

    async def fake_survey() -> OpSurvey:
        during.append(list(shares))
        if fails:
            raise OSError("the child could not start")
        return OpSurvey(accelerator="cpu", ops={})

    monkeypatch.setattr(alert_watch, "survey_ops_async", fake_survey)
    w = watch(tmp_path, Recorder(), expecting=False, share_cores=shares.append)
    await w._survey_ops(0.0)
    assert during == [[1]] and shares == [1, 0]
    if not fails:  # the next supervisor reads the record: no child, nothing borrowed
        shares.clear()
        await watch(tmp_path, Recorder(), expecting=False, share_cores=shares.append)._survey_ops(3600.0)
        assert shares == [] and len(during) == 1


def test_an_unreadable_or_answerless_survey_record_is_not_trusted(tmp_path: Path) -> None:
    from engine.doctor import op_survey_record as rec
    from engine.doctor.deepspeed_ops import OpSurvey

    key = rec.environment_key()
    rec.write_record(tmp_path, key, OpSurvey(unavailable="op check timed out after 60 s"))
    assert not (tmp_path / rec.RECORD_NAME).exists()  # worth asking again
    (tmp_path / rec.RECORD_NAME).write_text("{not json")
    assert rec.read_record(tmp_path, key) is None
    rec.write_record(tmp_path, key, OpSurvey(accelerator="cpu"))
    assert rec.read_record(tmp_path, key) == OpSurvey(accelerator="cpu")
    assert rec.read_record(tmp_path, {**key, "CUDA_VISIBLE_DEVICES": "1"}) is None


async def test_without_ops_delay_there_is_no_survey(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def boom() -> Any:
        raise AssertionError("no survey expected")

    monkeypatch.setattr(alert_watch, "survey_ops_async", boom)
    monkeypatch.setattr(alert_watch, "TICK_S", 0.02)
    ticks: list[None] = []  # each tick asks whether steps are expected, before the survey's turn
    w = watch(tmp_path, Recorder(), expecting=lambda: ticks.append(None) or True, ops_delay_s=None)
    task = asyncio.create_task(w.run())
    await until(lambda: len(ticks) >= 5, what="five ticks of the watch", seen=lambda: len(ticks))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert w._ops_task is None


def stored(seq: int, rule: str, state: str = "firing", severity: str = "critical") -> Event:
    return Event(seq=seq, ts=float(seq), type="alert", severity=severity, data={"rule": rule, "state": state})


async def test_alerts_a_previous_supervisor_left_firing_are_resolved_with_the_reason(tmp_path: Path) -> None:
    record = Recorder()
    w = watch(tmp_path, record)
    old = [
        stored(1, "heartbeat"),
        stored(2, "disk_low"),
        stored(3, "disk_low", "resolved", "info"),  # closed before the old supervisor died
        stored(4, "restart", severity="warning"),  # an instant: nothing to resolve
        stored(5, "gpu_temperature.0", severity="warning"),
        stored(6, "gpu_temperature.0", severity="warning"),  # a reminder of the same episode
    ]
    assert w.resolve_stale(old) == 2
    closed = [(e.data["rule"], e.data["state"], e.data["reason"], e.data["fired_seq"]) for e in record.events]
    assert closed == [
        ("gpu_temperature.0", "resolved", "supervisor_restarted", 6),
        ("heartbeat", "resolved", "supervisor_restarted", 1),
    ]
    assert all(e.severity == "info" and "supervisor restarted" in e.message for e in record.events)
    assert w.resolve_stale([*old, *record.events]) == 0  # a second restart finds nothing left open


# ----------------------------------------------------------------- the real supervisor


@pytest.fixture
def run(home: Path) -> RunDir:
    config = build_run_config(
        {
            "alerts": {"command": appender(home / "hook.ndjson", 0.5), "doctor_interval_s": 1.0},
            "restart": {"backoff_initial_s": 0.1},
            "policy": {"require_accelerator": True},
        },
        steps=100000,
    )
    return RunDir.create(config, home=home)


def is_event(kind: str, rule: str | None = None) -> Any:
    return lambda m: (
        m.kind == "event" and m.event.type == kind and (rule is None or m.event.data.get("rule") == rule)
    )


@pytest.mark.slow
async def test_a_restart_raises_an_alert_and_the_command_finishes_before_the_end(
    run: RunDir, home: Path, start, connect, fake_env
) -> None:
    fake_env(rate_hz=50)
    running = await start()
    client = await connect()
    await client.until(lambda m: m.kind == "telemetry")
    os.kill(running.supervisor.attempts.pid, signal.SIGKILL)
    alert, _ = await client.until(is_event("alert", "restart"), timeout=30)
    assert alert.event.severity == "warning" and "SIGKILL" in alert.event.message
    running.supervisor.request_stop("test over")  # while the slow command (0.5 s) still runs
    assert await running.result(timeout=60) == 0
    hooked = [p for p in lines_of(home / "hook.ndjson") if p["data"].get("rule") == "restart"]
    assert hooked and hooked[0]["seq"] == alert.event.seq


@pytest.mark.slow
async def test_doctor_reports_periodically_and_the_policy_reads_them(
    run: RunDir, start, connect, fake_env
) -> None:
    fake_env(rate_hz=20)
    await start()
    client = await connect(replay_from=0)
    await client.until(is_event("doctor_report"), timeout=30)
    second, _ = await client.until(is_event("doctor_report"), timeout=30)  # doctor_interval_s = 1
    ok, _ = await client.answer(Propose(id="p1", values={"lr_multiplier": 0.5}))
    assert ok.kind == "ok", ok
    if second.event.data["hardware"]["gpus"]:  # a GPU machine: the accelerator is there
        assert ok.result["directive"]["state"] == "pending", ok.result["verdict"]["reasons"]
    else:  # this machine: the doctor finds no GPU, and the run requires one
        reasons = ok.result["verdict"]["reasons"]
        assert ok.result["directive"]["state"] == "rejected"
        assert "environment unhealthy: accelerator required but the doctor finds no GPU" in reasons


@pytest.mark.slow
async def test_a_restarted_supervisor_closes_the_alerts_its_predecessor_left_firing(
    run: RunDir, start, connect, fake_env
) -> None:
    """``memtui resume``: the old supervisor died with a heartbeat alert firing; the console's
    alert list must not show it firing forever, and the rules judge afresh."""
    from engine.run.storage.store import Store
    from memtui.console.alert_timeline import alert_episodes

    with Store(run.store) as store:
        store.append_event(
            "alert",
            severity="critical",
            message="no step for 60 s",
            data={"rule": "heartbeat", "state": "firing"},
        )
        store.append_event(
            "alert", severity="critical", message="disk low", data={"rule": "disk_low", "state": "firing"}
        )
    with Store(run.store, readonly=True) as store:
        before = {e.rule for e in alert_episodes(store.events_since(0)) if e.firing}
    assert before == {"heartbeat", "disk_low"}  # what the console showed, forever
    fake_env(rate_hz=20)
    running = await start()
    events = running.supervisor.store.events_since(0)
    resolved = [e for e in events if e.type == "alert" and e.data.get("state") == "resolved"]
    assert {e.data["rule"] for e in resolved} == {"heartbeat", "disk_low"}
    assert all(e.data["reason"] == "supervisor_restarted" for e in resolved)
    started = next(e.seq for e in events if e.type == "run_started" and e.seq > 2)
    assert all(e.seq > started for e in resolved)  # recorded by the new supervisor, at its start
    assert [e for e in alert_episodes(events) if e.firing] == []
    assert running.supervisor.health is not None and running.supervisor.health.active == {}
    client = await connect(replay_from=0)  # a console attaching now gets the resolutions too
    await client.until(lambda m: m.kind == "event" and m.event.seq == resolved[-1].seq, timeout=30)


class SessionNoting(FakeNvml):
    """A fake NVML that counts how often the driver's state is loaded and unloaded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inits = self.shutdowns = 0

    def init(self) -> None:
        super().init()
        self.inits += 1

    def shutdown(self) -> None:
        super().shutdown()
        self.shutdowns += 1


async def test_nvml_is_initialised_once_for_the_watchs_life(tmp_path: Path) -> None:
    nvml, record = SessionNoting([healthy_gpu()]), Recorder()
    w = watch(tmp_path, record, nvml)
    await w._doctor()
    for _ in range(3):
        await w._hardware()
    assert w.latest is not None and len(w.latest.gpus) == 1
    assert (nvml.inits, nvml.shutdowns) == (1, 0)
    await w.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
