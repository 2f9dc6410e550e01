"""How often to save with ``checkpoint.every_steps = "auto"``: the interval (optimizer steps)
that keeps the training stall of saves under ``checkpoint.max_stall`` of the run's time.

A save stalls training for ``stall_s`` (the write alone when it is sealed in the
background, plus any wait for the previous seal); between two saves ``interval`` steps of
``step_s`` each run, so the stall share is ``stall_s / (interval * step_s)``. The interval
is the smallest that keeps that share under ``AIM`` x the budget (a margin for a slower
save or faster steps before the next decision), within ``[min, max]`` steps; while the disk
cannot hold ``keep`` checkpoints of the newest one's size (plus the one being written) it
is the maximum, saving as rarely as allowed. Before any save is measured it is
``FIRST_INTERVAL_STEPS``; a resumed trainer starts from the figures its checkpoint
carried. (CheckFreq, FAST '21, tunes the interval the same way.)

Figures are smoothed (exponential averages), and a decision is made at each save only: the
interval in force stays while the share it gives stays within ``KEEP_BAND`` of the aim, so
a noisy step or one slow save does not move it. Pure: no clock, no I/O; the trainer feeds
it measurements (``engine.trainer.checkpoints.save_cadence``) and rank 0's decision is
broadcast at the save, so every rank counts the same interval. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from engine.checkpoints.selection import SPACE_HEADROOM

FIRST_INTERVAL_STEPS = 100
"""Steps before the first save (clamped into the bounds): early enough to measure a save
soon, and a single save's stall however costly it turns out to be."""
STEP_WEIGHT = 0.05
"""Weight of each new step time in its running average (about the last 20 steps count)."""
SAVE_WEIGHT = 0.5
"""Weight of each new save stall in its running average (the last two or three saves)."""
SAVE_JUMP = 3.0
"""A save stall counts at most this many times the running average: one slow save (a busy
disk, a host's hiccup; 30x the usual was seen) at most doubles the interval, while a lasting
change is reached in a few saves (the average grows up to 2x a save)."""
AIM = 0.8
"""Of ``max_stall``: the share the interval aims at, so that drift until the next save's
decision stays under the budget."""
KEEP_BAND = (0.5, 1.2)
"""Of the aimed share: the interval in force stays while the share it gives on the newest
figures lies in this band (a noisy step time moves no interval; 1.2 x aim is still under
the budget, and a smoothed figure still catching up with a costlier save is let in early)."""

Limit = Literal["first", "stall_budget", "min_interval", "max_interval", "disk_room"]
"""What set the interval: the start-up default, the budget, a bound, or the disk's room."""


@dataclass(frozen=True)
class CadenceBounds:
    """The run's configured limits (``checkpoint.max_stall``, ``min/max_interval_steps``)."""

    max_stall: float
    """Largest share of the run's time spent stalled for saves (0.01 = 1%)."""
    min_steps: int
    max_steps: int
    keep: int
    """Checkpoints kept: the disk must hold this many (plus the one being written)."""


@dataclass(frozen=True)
class CadenceDecision:
    """One choice of the interval and the figures it came from."""

    interval: int
    """Steps between saves."""
    limit: Limit
    step_s: float | None = None
    """Smoothed step time (s) the choice used; None before any step was measured."""
    stall_s: float | None = None
    """Smoothed stall of one save (s); None before any save was measured."""
    share: float | None = None
    """Expected stall share at this interval: ``stall_s / (interval * step_s)``."""
    size_bytes: int = 0
    """The newest checkpoint's size."""
    room_bytes: int | None = None
    """Bytes the checkpoints may occupy: free disk plus the checkpoints already there."""

    def describe(self) -> str:
        """One line for the event log: the interval and why."""
        if self.limit == "first":
            return f"checkpoint every {self.interval} steps until a save is measured"
        figures = f"a save stalls {self.stall_s:.3f} s, a step takes {self.step_s:.3f} s"
        share = f"{self.share:.2%} of the run's time"
        why = {
            "stall_budget": f"{share}, under the budget",
            "min_interval": f"{share}; no more often than the minimum interval",
            "max_interval": f"{share}: the budget asks for more than the maximum interval",
            "disk_room": f"{share}; the disk cannot hold the kept checkpoints: saving as rarely as allowed",
        }[self.limit]
        return f"checkpoint every {self.interval} steps: {figures}, {why}"


def choose_interval(
    bounds: CadenceBounds, stall_s: float, step_s: float, size_bytes: int = 0, room_bytes: int | None = None
) -> CadenceDecision:
    """The interval for these smoothed figures (a pure function of them)."""

    def decided(interval: int, limit: Limit) -> CadenceDecision:
        share = stall_s / (interval * step_s) if step_s > 0 else 0.0
        return CadenceDecision(interval, limit, step_s, stall_s, share, size_bytes, room_bytes)

    if room_bytes is not None and size_bytes * (bounds.keep + SPACE_HEADROOM) > room_bytes:
        return decided(bounds.max_steps, "disk_room")
    if step_s <= 0:
        return decided(bounds.max_steps, "max_interval")  # no step time yet: save rarely
    wanted = math.ceil(stall_s / (AIM * bounds.max_stall * step_s))
    if wanted <= bounds.min_steps:
        return decided(bounds.min_steps, "min_interval")
    if wanted >= bounds.max_steps:
        return decided(bounds.max_steps, "max_interval")
    return decided(wanted, "stall_budget")


class Cadence:
    """The running figures and the interval in force (rank 0's; the others take its word)."""

    def __init__(self, bounds: CadenceBounds) -> None:
        self.bounds = bounds
        self.decision = CadenceDecision(
            min(max(FIRST_INTERVAL_STEPS, bounds.min_steps), bounds.max_steps), "first"
        )
        self.step_s: float | None = None
        self.stall_s: float | None = None

    @property
    def interval(self) -> int:
        return self.decision.interval

    def figures(self) -> dict[str, float]:
        """The smoothed figures, for a checkpoint to carry into the next trainer."""
        if self.step_s is None or self.stall_s is None:
            return {}
        return {"step_s": self.step_s, "stall_s": self.stall_s}

    def resume(self, figures: dict[str, float]) -> None:
        """Start from the figures a checkpoint carried (``figures``), not the default: a
        restart keeps the interval the run had (ignored unless both are positive numbers)."""
        step_s, stall_s = figures.get("step_s"), figures.get("stall_s")
        if isinstance(step_s, (int, float)) and isinstance(stall_s, (int, float)) and step_s > 0 <= stall_s:
            self.step_s, self.stall_s = float(step_s), float(stall_s)
            self.decision = choose_interval(self.bounds, self.stall_s, self.step_s)

    def due(self, step: int, last_saved_step: int) -> bool:
        return interval_due(step, last_saved_step, self.interval)

    def note_step(self, step_s: float) -> None:
        """One optimizer step's time (s)."""
        self.step_s = _smoothed(self.step_s, step_s, STEP_WEIGHT)

    def note_save(
        self, stall_s: float, size_bytes: int = 0, room_bytes: int | None = None
    ) -> CadenceDecision | None:
        """A save stalled training ``stall_s``; returns the new decision, or None when the
        interval stays (the same one, or the one in force still gives a share in
        ``KEEP_BAND``)."""
        if self.stall_s is not None:
            stall_s = min(stall_s, SAVE_JUMP * self.stall_s)
        self.stall_s = _smoothed(self.stall_s, stall_s, SAVE_WEIGHT)
        step_s = self.step_s or 0.0
        new = choose_interval(self.bounds, self.stall_s, step_s, size_bytes, room_bytes)
        old = self.decision
        if (new.interval, new.limit) == (old.interval, old.limit):
            return None
        share = self.stall_s / (old.interval * step_s) if step_s > 0 else 0.0
        aim = AIM * self.bounds.max_stall
        in_band = KEEP_BAND[0] * aim <= share <= KEEP_BAND[1] * aim
        if in_band and old.limit != "first" and "disk_room" not in (old.limit, new.limit):
            return None
        self.decision = new
        return new


def interval_due(step: int, last_saved_step: int, interval: int) -> bool:
    """A save is due ``interval`` steps after the last one (or after the start, step 0);
    never twice for one step."""
    return step > last_saved_step and step - max(last_saved_step, 0) >= interval


def _smoothed(average: float | None, value: float, weight: float) -> float:
    return value if average is None else average + weight * (value - average)
