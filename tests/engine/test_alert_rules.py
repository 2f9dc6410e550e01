"""The alert rules: each fires, clears with hysteresis, and never storms at a threshold."""

from __future__ import annotations

import math
from typing import Any

import pytest

from engine.alerts import rules
from engine.alerts.rules import AlertRules, Latch
from engine.config.run_config import AlertConfig
from engine.doctor.nvml_probe import probe_gpus
from engine.domain import TelemetrySample
from engine.hardware_report import DiskReport, HardwareSnapshot, HostReport
from tests.fakes.fake_nvml import FakeNvml, FakeNvmlError, GiB, healthy_gpu

CFG = AlertConfig(throttle_s=60.0, repeat_s=3600.0, throughput_baseline_steps=5)


@pytest.fixture(autouse=True)
def unsmoothed_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each loss judged as it comes (the rules smooth it over 20 steps in a run)."""
    monkeypatch.setattr(rules, "LOSS_SMOOTHING_STEPS", 1)


def sample(step: int, **over: Any) -> TelemetrySample:
    fields: dict[str, Any] = dict(
        step=step,
        ts=0.0,
        samples=step,
        tokens=step,
        loss=2.0,
        lr=1e-3,
        step_time_s=0.1,
        tokens_per_s=1000.0,
        mem_reserved=50,
        mem_capacity=100,
        micro_batch=8,
        grad_accum=1,
    )
    fields.update(over)
    return TelemetrySample(**fields)


def rules_of(alerts: list[Any]) -> list[str]:
    return [f"{a.rule}:{'resolved' if a.resolved else 'firing'}" for a in alerts]


def gpus(temperature: int, throttle: int = 0) -> HardwareSnapshot:
    found, why = probe_gpus(FakeNvml([healthy_gpu(temperature=temperature, throttle=throttle)]))
    return HardwareSnapshot(ts=0.0, nvml=why, gpus=found)


def test_latch_hovering_at_threshold_alerts_once() -> None:
    latch, fired = Latch(), []
    for t, value in enumerate([0.91, 0.92, 0.919, 0.92, 0.921, 0.90, 0.93] * 20):
        fired.append(latch.update(value >= 0.92, value < 0.87, float(t), 60.0, 3600.0))
    assert [f for f in fired if f] == ["fire"]


def test_memory_headroom_fires_clears_and_does_not_storm() -> None:
    rules, out = AlertRules(CFG), []  # memory.warn 0.85, memory.hysteresis 0.05: clears below 0.80
    for t, used in enumerate([50, 86, 84, 86, 87, 84, 86, 81, 79]):
        out += rules.on_step(sample(t + 1, mem_reserved=used), float(t))
    assert rules_of(out) == ["memory_headroom:firing", "memory_headroom:resolved"]


def test_throttling_keeps_a_quick_refire_quiet() -> None:
    rules, out = AlertRules(CFG), []
    for t, used in [(0, 95), (1, 70), (2, 95), (3, 70), (100, 95)]:
        out += rules.on_step(sample(t + 1, mem_reserved=used), float(t))
    assert rules_of(out) == ["memory_headroom:firing", "memory_headroom:resolved", "memory_headroom:firing"]


def test_throughput_drop_against_moving_baseline() -> None:
    rules, out = AlertRules(CFG), []
    speeds = [1000.0] * 10 + [400.0] * 8 + [1000.0] * 5  # five steps back: it clears
    for t, speed in enumerate(speeds):
        out += rules.on_step(sample(t + 1, tokens_per_s=speed), float(t))
    assert rules_of(out) == ["throughput_drop:firing", "throughput_drop:resolved"]


def test_one_slow_step_and_a_geometry_change_are_not_drops() -> None:
    rules, out = AlertRules(CFG), []
    speeds = [1000.0] * 10 + [100.0] + [1000.0] * 5
    for t, speed in enumerate(speeds):
        out += rules.on_step(sample(t + 1, tokens_per_s=speed), float(t))
    for t in range(10):  # smaller micro-batch, slower: a new baseline
        out += rules.on_step(sample(100 + t, tokens_per_s=300.0, micro_batch=2, grad_accum=4), 100.0 + t)
    assert out == []


def test_loss_nan_and_divergence() -> None:
    rules = AlertRules(CFG)
    assert rules_of(rules.on_step(sample(1, loss=math.nan), 0.0)) == ["loss_nan:firing"]
    assert rules_of(rules.on_step(sample(2, loss=2.0), 1.0)) == ["loss_nan:resolved"]
    out = []
    for t, loss in enumerate([1.0, 1.5, 2.0, 2.1, 1.99, 2.05, 1.2]):
        out += rules.on_step(sample(3 + t, loss=loss), 2.0 + t)
    assert rules_of(out) == ["loss_diverging:firing", "loss_diverging:resolved"]


def test_loss_scale_at_floor() -> None:
    rules, out = AlertRules(CFG), []
    for t, scale in enumerate([4096.0, 1.0, 1.0, 1.5, 1.0, 2.0]):
        out += rules.on_step(sample(t + 1, loss_scale=scale), float(t))
    assert rules_of(out) == ["loss_scale_floor:firing", "loss_scale_floor:resolved"]


def test_gpu_temperature_hysteresis_and_throttle_from_fake_nvml() -> None:
    rules, out = AlertRules(CFG), []  # fake slowdown 90 C, margin 5: alert at 85, clear below 80
    for t, temp in enumerate([70, 85, 84, 85, 86, 81, 85, 79]):
        out += rules.on_hardware(gpus(temp), float(t))
    assert rules_of(out) == ["gpu_temperature.0:firing", "gpu_temperature.0:resolved"]
    throttled = rules.on_hardware(gpus(60, throttle=0x40), 100.0)
    assert rules_of(throttled) == ["gpu_throttle.0:firing"] and "hw_thermal" in throttled[0].message
    assert rules.on_hardware(gpus(60, throttle=0x4), 101.0)[0].resolved  # a power cap alone is normal


def test_nvml_raising_gives_no_hardware_alerts() -> None:
    found, why = probe_gpus(FakeNvml(fail={"temperature": FakeNvmlError("Not Supported")}))
    assert AlertRules(CFG).on_hardware(HardwareSnapshot(ts=0.0, gpus=found), 0.0) == []
    found, why = probe_gpus(FakeNvml(fail={"init": FakeNvmlError("Driver Not Loaded")}))
    assert found == [] and AlertRules(CFG).on_hardware(HardwareSnapshot(ts=0.0, nvml=why), 0.0) == []


def test_disk_low_for_the_next_checkpoint() -> None:
    rules, out = AlertRules(AlertConfig(disk_min_free_mb=0, throttle_s=0.0)), []
    for t, free in enumerate([20, 14, 15, 15.5, 16]):  # next checkpoint 10 GiB x 1.5 = 15 GiB
        disk = DiskReport(label="checkpoints", path="/c", free_bytes=int(free * GiB))
        out += rules.on_hardware(HardwareSnapshot(ts=0.0, host=HostReport(disks=[disk])), float(t), 10 * GiB)
    assert rules_of(out) == ["disk_low:firing", "disk_low:resolved"]


def test_disk_low_reserve_is_a_share_of_a_small_disk() -> None:
    """The 1 GiB reserve would call a 40 MB disk with 35 MB free low for ever: on a small
    disk it is a share of the size (at least 16 MiB); the figures are in MiB."""
    rules = AlertRules(AlertConfig(throttle_s=0.0))

    def judged(free: int, total: int, checkpoint: int) -> list[Any]:
        disk = DiskReport(label="checkpoints", path="/c", free_bytes=free, total_bytes=total)
        return rules.on_hardware(HardwareSnapshot(ts=0.0, host=HostReport(disks=[disk])), 0.0, checkpoint)

    assert judged(35_000_000, 40_000_000, 4 << 20) == []  # 4 MiB x 1.5 + 16 MiB < 33.4 MiB
    low = judged(35_000_000, 40_000_000, 12 << 20)  # 12 MiB x 1.5 + 16 MiB > 33.4 MiB
    assert rules_of(low) == ["disk_low:firing"] and "33.4 MiB free" in low[0].message
    large = AlertRules(AlertConfig(throttle_s=0.0))  # a large disk: the reserve as configured
    disk = DiskReport(label="checkpoints", path="/c", free_bytes=GiB + (10 << 20), total_bytes=1000 * GiB)
    assert rules_of(
        large.on_hardware(HardwareSnapshot(ts=0.0, host=HostReport(disks=[disk])), 0.0, 10 << 20)
    ) == ["disk_low:firing"]


def test_heartbeat_fires_once_and_clears_on_a_step() -> None:
    rules = AlertRules(AlertConfig(no_step_s=10.0))
    assert rules.on_tick(100.0, True) == []  # no trainer yet: no clock
    rules.beat(100.0)
    assert rules.on_tick(109.0, True) == []
    fired = [a for t in range(110, 200) for a in rules.on_tick(float(t), True)]
    assert rules_of(fired) == ["heartbeat:firing"] and fired[0].severity == "critical"
    assert rules.on_tick(500.0, False) == []  # paused or stopping: not expected to step
    assert rules_of(rules.on_step(sample(1), 501.0)) == ["heartbeat:resolved"]


def test_restarts_alert_but_a_crash_loop_is_throttled() -> None:
    rules = AlertRules(CFG)
    out = [a for t in range(10) for a in rules.on_restart(float(t), "crashed", {})]
    assert rules_of(out) == ["restart:firing"]
    assert rules_of(rules.on_restart(100.0, "crashed", {})) == ["restart:firing"]


def test_throughput_hovering_at_the_drop_threshold_is_one_alert() -> None:
    rules, out = AlertRules(CFG), []  # baseline 1000: drop below 500, clear at 750 and up
    speeds = [1000.0] * 10 + [400.0] * 5 + [480.0, 520.0, 540.0, 495.0] * 10 + [1000.0] * 5
    for t, speed in enumerate(speeds):
        out += rules.on_step(sample(t + 1, tokens_per_s=speed), float(t))
    assert rules_of(out) == ["throughput_drop:firing", "throughput_drop:resolved"]
    assert out[1].data["step"] == 60  # the fifth step back at 1000, not the first above 500
    quiet = AlertRules(CFG)  # never five dropped steps in a row: no trend, no alert
    hover = [1000.0] * 10 + [490.0, 510.0] * 20
    assert [
        a for t, v in enumerate(hover) for a in quiet.on_step(sample(t + 1, tokens_per_s=v), float(t))
    ] == []


def test_a_restart_is_a_new_throughput_baseline() -> None:
    """A new attempt's first steps are slow (imports, a cold cache) at the same geometry:
    not a drop against the attempt before."""
    rules, out = AlertRules(CFG), []
    for t in range(10):
        out += rules.on_step(sample(t + 1, attempt=1, tokens_per_s=1000.0), float(t))
    for t, speed in enumerate([100.0] * 6 + [300.0] * 6 + [1000.0] * 10):
        out += rules.on_step(sample(9 + t, attempt=2, tokens_per_s=speed), 100.0 + t)
    assert out == []


def test_a_shared_machine_hovering_above_the_drop_does_not_flap_the_alert() -> None:
    """Minutes apart (past the throttle), six steps at 40% of the baseline then three at
    60%: one episode, not a fire and a resolve each time; a real recovery clears it."""
    rules, out, t = AlertRules(CFG), [], 0.0
    speeds = [1000.0] * 10 + ([400.0] * 6 + [600.0] * 3 + [1000.0]) * 6 + [1000.0] * 5
    for step, speed in enumerate(speeds, start=1):
        out += rules.on_step(sample(step, tokens_per_s=speed), t)
        t += 30.0
    assert rules_of(out) == ["throughput_drop:firing", "throughput_drop:resolved"]


def test_flapping_nan_loss_and_throttle_are_throttled_not_a_storm() -> None:
    rules, out = AlertRules(CFG), []  # throttle_s 60: a re-fire within a minute stays quiet
    for t in range(20):
        out += rules.on_step(sample(t + 1, loss=math.nan if t % 2 == 0 else 2.0), float(t))
        out += rules.on_hardware(gpus(60, throttle=0x40 if t % 2 == 0 else 0), float(t))
    assert sorted(rules_of(out)) == sorted(
        ["loss_nan:firing", "loss_nan:resolved", "gpu_throttle.0:firing", "gpu_throttle.0:resolved"]
    )
    later = rules.on_step(sample(100, loss=math.inf), 100.0) + rules.on_hardware(
        gpus(60, throttle=0x8), 100.0
    )
    assert rules_of(later) == ["loss_nan:firing", "gpu_throttle.0:firing"]  # past the window: alerted again


def test_data_starvation_fires_after_five_starved_steps_and_clears_after_five_fed() -> None:
    rules, out = AlertRules(CFG), []  # share 0.3 of a 0.1 s step; hysteresis 0.05: clears under 0.25
    waits = [0.01] * 3 + [0.05, 0.04] * 2 + [0.01] + [0.04] * 5 + [0.028] * 3 + [0.01] * 5 + [None] * 10
    for t, wait in enumerate(waits):
        out += rules.on_step(sample(t + 1, data_wait_s=wait), float(t))
    assert rules_of(out) == ["data_starved:firing", "data_starved:resolved"]
    assert out[0].data["step"] == 13 and out[0].data["share"] == pytest.approx(0.4)  # the 5th in a row
    assert out[1].data["step"] == 21  # 0.28 is not back under the margin: the 5th at 0.1 clears it
    assert "waits for data 40% of each step" in out[0].message
