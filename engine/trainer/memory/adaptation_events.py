"""What adaptive memory tells the run: a geometry change (``memory_adapted``) and a change
of memory level (``memory_level``), each as the typed payload, its one-line message and
its severity, ready for ``Link.event``."""

from __future__ import annotations

from engine.domain import Severity
from engine.events import MemoryAdapted, MemoryLevelChanged
from engine.measures.memory_scale import MemoryLevel
from engine.memory.controller import Change

LEVEL_SEVERITY: dict[MemoryLevel, Severity] = {"ok": "info", "warn": "warning", "critical": "critical"}


def adapted_event(
    change: Change,
    step: int,
    mem_before: int | None,
    mem_after: int,
    budget: int,
    mem_kind: str,
    mem_resident_after: int | None = None,
) -> tuple[MemoryAdapted, str, Severity]:
    """``change`` applied before the step of 0-based index ``step`` (bytes: the expected or
    measured peak before, the predicted peak after, the budget)."""
    before, after = change.before, change.after
    severity: Severity = "warning" if change.kind in ("shrink", "oom") else "info"
    adapted = MemoryAdapted(
        kind=change.kind,
        reason=change.reason,
        step=step,
        from_micro_batch=before.micro_batch,
        to_micro_batch=after.micro_batch,
        from_grad_accum=before.grad_accum,
        to_grad_accum=after.grad_accum,
        mem_before=mem_before,
        mem_after_predicted=mem_after,
        mem_budget=budget,
        mem_kind=mem_kind,
        mem_resident_after=mem_resident_after,
    )
    message = (
        f"micro-batch {before.micro_batch}x{before.grad_accum} -> {after.micro_batch}x{after.grad_accum} "
        f"at step {step} ({change.kind}: {change.reason})"
    )
    return adapted, message, severity


def level_event(
    previous: MemoryLevel, level: MemoryLevel, step: int, expected: int, budget: int, room_share: float
) -> tuple[MemoryLevelChanged, str, Severity]:
    """The level moved from ``previous`` to ``level`` at ``step``, judged on ``expected``
    bytes (``room_share``: its part of the usable room)."""
    event = MemoryLevelChanged(
        step=step, level=level, previous=previous, expected_peak=expected, mem_budget=budget
    )
    message = (
        f"memory {previous} -> {level} at step {step}: "
        f"expected peak {expected / budget:.0%} of the budget ({room_share:.0%} of the usable room)"
    )
    return event, message, LEVEL_SEVERITY[level]
