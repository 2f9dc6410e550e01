"""Pure checkpoint decisions: when to save, which to keep, which to resume from.

No I/O and no torch: every function is a function of its arguments, so the rules are
tested on their own (tests/engine/test_checkpoint_policy.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from engine.checkpoints.manifest import Verdict

SPACE_HEADROOM = 1.25  # a new checkpoint may be this much bigger than the newest one


def save_due(
    step: int,
    last_saved_step: int,
    seconds_since_save: float,
    every_steps: int,
    every_minutes: float,
) -> bool:
    """Whether the step just completed should be checkpointed (steps and/or wall clock).

    ``every_steps`` 0 and ``every_minutes`` 0 disable that trigger; never twice per step.
    """
    if step <= last_saved_step:
        return False
    if every_steps and step % every_steps == 0:
        return True
    return bool(every_minutes) and seconds_since_save >= every_minutes * 60.0


def to_prune(
    steps: Iterable[int], keep: int, milestone_every: int, newest: int, pinned: Iterable[int] = ()
) -> list[int]:
    """Steps of committed checkpoints to delete once checkpoint ``newest`` has verified.

    Keeps the newest ``keep`` by step, every milestone (step a multiple of
    ``milestone_every``, 0 = none), every ``pinned`` step (a pending rollback's tag), and
    always ``newest`` itself. Oldest first.
    """
    ordered = sorted(set(steps), reverse=True)
    kept = set(ordered[:keep]) | {newest} | set(pinned)
    if milestone_every:
        kept |= {s for s in ordered if s % milestone_every == 0}
    return sorted(s for s in ordered if s not in kept)


def space_needed(estimate_bytes: int, min_free_bytes: int) -> int:
    """Bytes that must be free before a save: the estimate with headroom, plus the reserve."""
    return int(estimate_bytes * SPACE_HEADROOM) + min_free_bytes


# ------------------------------------------------------------------------- resume


@dataclass(frozen=True)
class Selection:
    """The newest verified checkpoint, and the newer ones rejected on the way to it."""

    chosen: Verdict | None
    rejected: list[Verdict] = field(default_factory=list)


def select_newest_verified(newest_first: Iterable[Verdict]) -> Selection:
    """Walk verdicts newest first and stop at the first that verified (lazily: verifying a
    tag reads all of it, so older tags are never read when a newer one is good)."""
    rejected: list[Verdict] = []
    for verdict in newest_first:
        if verdict.ok:
            return Selection(verdict, rejected)
        rejected.append(verdict)
    return Selection(None, rejected)


@dataclass(frozen=True)
class ResumePlan:
    action: Literal["resume", "fresh", "refuse"]
    reason: str
    chosen: Verdict | None = None


def plan_resume(selection: Selection, committed_before: bool, allow_fresh: bool) -> ResumePlan:
    """Resume from the chosen tag; else start fresh only if nothing was ever committed or a
    fresh start was asked for explicitly; else refuse, naming every problem.

    ``committed_before``: a ``latest`` pointer or a committed tag directory exists, i.e. the
    run had a checkpoint once (a silent fresh start would throw it away).
    """
    if selection.chosen is not None:
        skipped = f" (skipped {len(selection.rejected)} newer)" if selection.rejected else ""
        return ResumePlan("resume", f"resuming from {selection.chosen.tag}{skipped}", selection.chosen)
    problems = "; ".join(f"{v.tag}: {v.problem}" for v in selection.rejected)
    if not committed_before:
        return ResumePlan("fresh", "no checkpoint yet: starting at step 0")
    if allow_fresh:
        return ResumePlan(
            "fresh", f"fresh start asked for; no checkpoint verified ({problems or 'none left'})"
        )
    return ResumePlan(
        "refuse",
        "no checkpoint verifies"
        + (f" ({problems})" if problems else " (the latest pointer names none that exists)")
        + "; refusing a silent fresh start: resume with --fresh to start over at step 0",
    )
