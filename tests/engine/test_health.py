"""The environment's health as the policy reads it: the doctor's verdict and the alerts
firing become the policy's problems; and against the real supervisor, a stuck run's
heartbeat alert makes a Propose come back rejected, its end lets one through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.alerts.health import HealthBoard, blocks, health_problems
from engine.alerts.rules import AlertRules
from engine.config.config_file import build_run_config
from engine.config.run_config import AlertConfig, PolicyConfig
from engine.directives.directive import draft
from engine.directives.policy import LocalPolicyEngine, PolicyContext
from engine.doctor.findings import judge, verdict_of
from engine.doctor.nvml_probe import probe_gpus
from engine.domain import Event
from engine.hardware_report import DiskReport, DoctorReport, HardwareSnapshot, HostReport, SoftwareReport
from engine.run.directory import RunDir
from engine.wire.protocol import Propose
from tests.fakes.fake_nvml import FakeNvml, GiB, healthy_gpu

CPU_SW = SoftwareReport(python="3.11", torch="2.4.0+cpu", deepspeed="0.15")
CUDA_SW = SoftwareReport(
    python="3.11", torch="2.4.0+cu121", torch_cuda="12.1", deepspeed="0.15", driver="550", driver_cuda="12.4"
)


def report(sw: SoftwareReport, nvml: FakeNvml | None, free_gib: float = 100.0) -> DoctorReport:
    gpus, why = probe_gpus(nvml)
    disk = DiskReport(label="checkpoints", path="/ckpt", free_bytes=int(free_gib * GiB))
    hw = HardwareSnapshot(ts=0.0, nvml=why, gpus=gpus, host=HostReport(disks=[disk]))
    findings = judge(sw, hw)
    return DoctorReport(ts=0.0, verdict=verdict_of(findings), findings=findings, software=sw, hardware=hw)


def snapshot(throttle: int) -> HardwareSnapshot:
    gpus, why = probe_gpus(FakeNvml([healthy_gpu(temperature=60, throttle=throttle)]))
    return HardwareSnapshot(ts=0.0, nvml=why, gpus=gpus)


def test_healthy_gpu_machine_has_no_problems() -> None:
    healthy = report(CUDA_SW, FakeNvml())
    assert healthy.verdict == "healthy"
    assert health_problems(healthy, {}) == () and health_problems(healthy, {}, require_accelerator=True) == ()


def test_degraded_cpu_run_is_allowed_unless_it_requires_an_accelerator() -> None:
    cpu = report(CPU_SW, None)
    assert cpu.verdict == "degraded"
    assert health_problems(cpu, {}) == ()
    (problem,) = health_problems(cpu, {}, require_accelerator=True)
    assert "accelerator required" in problem and "no GPU" in problem


def ev(type_: str, data: dict[str, Any], message: str) -> Event:
    """An event as the journal stores it."""
    return Event(seq=1, ts=0.0, type=type_, message=message, data=data)


def test_require_accelerator_blocks_until_the_doctor_has_looked() -> None:
    assert health_problems(None, {}) == ()
    assert health_problems(None, {}, require_accelerator=True) == (
        "accelerator required: no doctor report yet",
    )


def test_unhealthy_doctor_verdict_blocks_with_its_findings() -> None:
    full = report(CUDA_SW, FakeNvml(), free_gib=0.5)
    assert full.verdict == "unhealthy"
    problems = health_problems(full, {})
    assert len(problems) == 1 and problems[0].startswith("doctor: checkpoints disk nearly full")


def test_thermal_alert_blocks_and_its_resolution_unblocks() -> None:
    rules, board = AlertRules(AlertConfig(throttle_s=0.0)), HealthBoard(report(CUDA_SW, FakeNvml()))
    for alert in rules.on_hardware(snapshot(throttle=0x40), 1.0):  # hw_thermal
        board.observe(ev("alert", alert.payload().data(), alert.message))
    assert board.problems() == ("GPU 0 clocks throttled: hw_thermal",)
    for alert in rules.on_hardware(snapshot(throttle=0), 2.0):
        board.observe(ev("alert", alert.payload().data(), alert.message))
    assert board.problems() == ()


def test_which_alerts_block() -> None:
    assert all(
        blocks(r) for r in ("heartbeat", "loss_nan", "gpu_throttle.3", "gpu_temperature.0", "disk_low")
    )
    # a directive is the remedy for these: lower the LR, a smaller micro-batch
    assert not any(blocks(r) for r in ("loss_diverging", "memory_headroom", "throughput_drop", "restart"))
    board = HealthBoard()
    board.observe(ev("alert", {"rule": "memory_headroom", "state": "firing"}, "memory 95% of budget"))
    board.observe(ev("alert", {"rule": "restart", "state": "firing"}, "trainer restarted"))
    assert board.problems() == () and "restart" not in board.active


def test_board_ignores_other_events_and_unreadable_reports() -> None:
    board = HealthBoard()
    assert not board.observe(ev("state_changed", {"rule": "heartbeat"}, "x"))
    assert not board.observe(ev("doctor_report", {"verdict": "bogus"}, "x"))
    assert board.report is None and board.active == {}


def test_policy_rejection_names_the_problem() -> None:
    policy = LocalPolicyEngine(build_run_config(steps=10))
    directive = draft({"lr_multiplier": 0.5}, source="t", step=0, ttl_s=60.0, now=0.0)
    problems = ("GPU 0 clocks throttled: hw_thermal",)
    verdict = policy.evaluate(directive, PolicyContext(now=1.0, problems=problems))  # nothing known in effect
    assert verdict.decision == "reject"
    assert verdict.reasons == [
        "environment unhealthy: GPU 0 clocks throttled: hw_thermal; "
        "lr_multiplier 0.5 adds risk: its value in effect is not known"
    ]


def test_require_accelerator_is_unset_by_default() -> None:
    assert PolicyConfig().require_accelerator is None
    assert PolicyConfig(require_accelerator=True).require_accelerator is True


def doctor_event(doctor: DoctorReport) -> Event:
    return ev("doctor_report", doctor.model_dump(mode="json"), "doctor")


def test_unset_require_accelerator_is_on_for_a_gpu_run_and_off_for_a_cpu_run() -> None:
    cpu = HealthBoard()
    cpu.observe(doctor_event(report(CPU_SW, None)))
    assert cpu.blockers(None) == () and cpu.problems(None) == ()
    gpu = HealthBoard()
    gpu.observe(doctor_event(report(CUDA_SW, FakeNvml())))
    assert gpu.blockers(None) == ()
    gpu.observe(doctor_event(report(CUDA_SW, None)))  # the run's GPU is gone
    assert gpu.blockers(None) == ("accelerator required but the doctor finds no GPU",)
    assert gpu.blockers(False) == () and cpu.blockers(True) == gpu.blockers(None)


def test_a_missing_accelerator_rejects_remedies_too() -> None:
    policy = LocalPolicyEngine(build_run_config(steps=10))
    directive = draft({"lr_multiplier": 0.5}, source="t", step=0, ttl_s=60.0, now=0.0)
    missing = ("accelerator required but the doctor finds no GPU",)
    current = {"lr_multiplier": 1.0}
    verdict = policy.evaluate(
        directive, PolicyContext(now=1.0, problems=missing, blockers=missing, current=current)
    )
    assert verdict.decision == "reject"
    assert verdict.reasons == ["environment unhealthy: accelerator required but the doctor finds no GPU"]
    remedy = policy.evaluate(directive, PolicyContext(now=1.0, problems=missing, current=current))
    assert remedy.decision == "allow"  # as a health problem alone, a remedy would pass


# ----------------------------------------------------------------- the real supervisor

NO_STEP_S = 1.0


@pytest.fixture
def run(home: Path) -> RunDir:
    config = build_run_config({"alerts": {"no_step_s": NO_STEP_S}}, steps=100)
    return RunDir.create(config, home=home)


def is_alert(rule: str, state: str):  # type: ignore[no-untyped-def]
    return lambda m: (
        m.kind == "event"
        and m.event.type == "alert"
        and m.event.data.get("rule") == rule
        and m.event.data.get("state") == state
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_stuck_run_rejects_a_proposal_and_a_healthy_one_accepts(
    run: RunDir, start, connect, fake_env, tmp_path: Path
) -> None:
    # stuck as in a hung collective: the process runs (and gives its stacks when the
    # heartbeat alert asks) but no step comes until the gate is opened
    gate = tmp_path / "unstick"
    fake_env(rate_hz=50, stuck_at=20, stuck_gate=gate)
    await start()
    client = await connect()
    await client.until(lambda m: m.kind == "telemetry")
    ok, _ = await client.answer(Propose(id="p0", values={"lr_multiplier": 0.5}))
    assert ok.kind == "ok" and ok.result["directive"]["state"] == "pending", ok
    try:
        await client.until(is_alert("heartbeat", "firing"), timeout=30)
        ok, _ = await client.answer(Propose(id="p1", values={"gradient_clip_norm": 1.25}))
        assert ok.kind == "ok" and ok.result["directive"]["state"] == "rejected"
        (reason,) = ok.result["verdict"]["reasons"]
        assert reason.startswith("environment unhealthy: no step for") and "stuck" in reason
        assert reason.endswith("gradient_clip_norm 1.25 above the 1 in effect adds risk")
        ok, _ = await client.answer(Propose(id="p1r", values={"lr_multiplier": 0.5}))  # a remedy
        assert ok.result["directive"]["state"] == "pending", ok.result["verdict"]["reasons"]
        assert "let through as a remedy: lr_multiplier 0.5 (from 1)" in ok.result["verdict"]["reasons"][0]
    finally:
        gate.touch()
    await client.until(is_alert("heartbeat", "resolved"), timeout=30)
    ok, _ = await client.answer(Propose(id="p2", values={"lr_multiplier": 0.5}))
    assert ok.result["directive"]["state"] == "pending", ok.result["verdict"]["reasons"]
