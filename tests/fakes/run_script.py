"""What a scripted fake run plays: step samples, rank reports, directives, stored events.

Builders for tests and for ``tests.fakes.scripted_engine``: a plausible CPU step sample
(``make_sample``), the ranks' memory a multi-rank run reports (``make_ranks``), a pending
directive as an operator sees it (``make_directive``), an event as the store numbers it
(``make_event``, from a typed payload or a bare type) and a doctor report's data
(``doctor_data``). ``started_history`` is the history a real supervisor has recorded once its
first trainer reports: every event built from its ``engine.events`` payload, so a payload
change breaks the script rather than the console tests that read it.
"""

from __future__ import annotations

from typing import Any

from engine.domain import Event, RankMemory, TelemetrySample
from engine.events import (
    DoctorReported,
    Payload,
    RunStarted,
    StateChanged,
    TrainerLaunched,
    TrainerStarted,
)
from engine.hardware_report import Finding, HardwareSnapshot, SoftwareReport
from engine.wire.protocol import DirectiveView

T0 = 1_700_000_000.0
"""Unix time, s, at which every scripted run begins."""


def make_sample(step: int, **over: Any) -> TelemetrySample:
    """A plausible CPU step sample; ``over`` replaces any field."""
    fields: dict[str, Any] = dict(
        step=step,
        ts=T0 + step * 0.05,
        samples=step * 8,
        tokens=step * 8 * 128,
        loss=5.5 - step * 0.01,
        lr=3e-3,
        grad_norm=0.8,
        loss_scale=4096.0,
        step_time_s=0.05,
        tokens_per_s=20_480.0,
        mem_allocated=300 * 2**20,
        mem_reserved=420 * 2**20,
        mem_peak=450 * 2**20,
        mem_capacity=2 * 2**30,
        mem_kind="cpu-rss",
        micro_batch=8,
        grad_accum=1,
    )
    fields.update(over)
    return TelemetrySample(**fields)


RANK_SKEW = 96 * 2**20
"""Bytes each further rank holds more than the one before (a rank that holds more than its
peers, e.g. the one with the embedding's shard, is what per-rank rows are for)."""


def make_ranks(sample: TelemetrySample, ranks: int) -> list[RankMemory]:
    """``ranks`` ranks' memory around ``sample``'s own (rank 0's), each a little fuller."""
    return [
        RankMemory(
            rank=r,
            allocated=sample.mem_allocated + r * RANK_SKEW,
            reserved=sample.mem_reserved + r * RANK_SKEW + r * 2**20 * 16,
            peak=sample.mem_peak + r * RANK_SKEW,
            capacity=sample.mem_capacity,
        )
        for r in range(ranks)
    ]


def make_directive(directive_id: str = "d-1", **over: Any) -> DirectiveView:
    """A pending rule-planner directive: lower the LR, clamped by the policy to its bound."""
    fields: dict[str, Any] = dict(
        id=directive_id,
        source="rules",
        created_at=T0,
        expires_at=T0 + 300,
        step=200,
        requested={"lr_multiplier": 0.5, "gradient_clip_norm": 2.0},
        allowed={"lr_multiplier": 0.5, "gradient_clip_norm": 1.25},
        in_effect={"lr_multiplier": 1.0, "gradient_clip_norm": 1.5},
        bounds={"lr_multiplier": (0.1, 0.85), "gradient_clip_norm": (0.1, 1.25)},
        reasons=["loss spiked 3x over its 50-step mean", "gradient_clip_norm clamped to 1.25"],
    )
    fields.update(over)
    return DirectiveView(**fields)


def make_event(seq: int, type: str | Payload = "note", message: str | None = None, **over: Any) -> Event:
    """An event as the store numbers it; ``type`` may be a typed payload (its type and data)."""
    if isinstance(type, Payload):
        over.setdefault("data", type.data())
        over.setdefault("severity", type.severity)
        type = type.event_type
    fields: dict[str, Any] = dict(seq=seq, ts=T0 + seq, type=type, message=message or f"event {seq}")
    fields.update(over)  # ``ts`` too
    return Event(**fields)


def doctor_data(
    verdict: str = "degraded",
    findings: tuple[tuple[str, str], ...] = (),
    hardware: HardwareSnapshot | None = None,
) -> dict[str, Any]:
    """A ``doctor_report`` event's data as the supervisor records it: ``findings`` are
    (level, message) pairs; the software report is a bare one."""
    report = DoctorReported(
        ts=T0,
        verdict=verdict,  # type: ignore[arg-type]
        findings=[Finding(level=level, message=message) for level, message in findings],  # type: ignore[arg-type]
        software=SoftwareReport(python="3.11"),
        hardware=hardware or HardwareSnapshot(ts=T0),
    )
    return report.data()


FAKE_TRAINER_PID = 4242
"""The pid the fake's first trainer attempt plays (each restart adds one)."""


def trainer_started(attempt: int, pid: int, world_size: int = 1) -> TrainerStarted:
    """What a trainer says when it starts, with the tiny preset's geometry."""
    return TrainerStarted(
        attempt=attempt,
        pid=pid,
        device="cpu",
        world_size=world_size,
        params=0,
        precision="fp16",
        zero_stage=0,
        micro_batch=8,
        grad_accum=1,
    )


def trainer_launched(attempt: int, pid: int, run_dir: str) -> TrainerLaunched:
    command = ["python", "-m", "engine.trainer", run_dir, "--attempt", str(attempt)]
    return TrainerLaunched(attempt=attempt, pid=pid, command=command)


def started_history(run_id: str, run_dir: str, supervisor_pid: int = 4241) -> list[Event]:
    """What a new run's store holds once its first trainer reports, in the real order:
    ``run_started``, ``state_changed`` to starting, ``trainer_launched``,
    ``trainer_started``, ``state_changed`` to running."""
    payloads: list[tuple[Payload, str]] = [
        (RunStarted(supervisor_pid=supervisor_pid, run_dir=run_dir), f"supervisor serving {run_id}"),
        (StateChanged(from_state=None, to="starting"), "(new run) -> starting"),
        (trainer_launched(1, FAKE_TRAINER_PID, run_dir), "trainer attempt 1 started"),
        (trainer_started(1, FAKE_TRAINER_PID), "trainer attempt 1"),
        (StateChanged(from_state="starting", to="running"), "starting -> running"),
    ]
    return [make_event(seq, payload, message) for seq, (payload, message) in enumerate(payloads, 1)]
