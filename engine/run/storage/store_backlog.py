"""What the run's store holds in memory until SQLite has committed it.

Step samples and policy verdicts wait here for the next batched write, as they always
did; events and meta changes wait here only until the transaction that writes them commits,
which is at once unless the disk refuses writes (a storage fault,
``engine.run.storage.storage_fault``). One write takes everything in one transaction, in the order
it came, and the backlog is cleared only once SQLite has committed: a refused write loses
nothing, and the next one writes the same rows again.

An event is numbered when it is appended (``seq``: the one the store will give it, the
stored maximum plus its place here), so it can be told to consoles before it is stored;
the write stores it under exactly that seq.

Bounded: at most ``limit`` samples (and as many verdicts) wait. Past that, newer ones are
dropped and counted (``dropped_steps``, with the range of their step numbers), never
older ones, so the record keeps every step up to the gap and says where the gap is. Events
and meta are never dropped: each event has already gone out with its seq, and while the
disk refuses writes the supervisor holds training, so only a few arrive a minute (alerts,
state changes, doctor reports); meta is one value per key. Torch-free; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.domain import DecisionRecord, Event, TelemetrySample

HELD_ROWS_MAX = 10_000
"""Samples (and, apart, verdicts) held at most while the disk refuses writes: minutes of
telemetry at tens of steps/s; a few KiB each in memory."""


@dataclass
class Backlog:
    """Rows not yet committed, in arrival order."""

    limit: int = HELD_ROWS_MAX
    steps: list[TelemetrySample] = field(default_factory=list)
    decisions: list[DecisionRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    """Meta key -> JSON-ready value (validated by the caller); the newest value wins."""
    dropped_steps: int = 0
    """Samples not kept because ``limit`` were already waiting (since the last report)."""
    dropped_step_range: tuple[int, int] | None = None
    """(first, last) step number of the samples dropped."""
    dropped_decisions: int = 0

    def add_step(self, sample: TelemetrySample) -> bool:
        """Keep ``sample`` unless ``limit`` wait already (then count it); True if kept."""
        if len(self.steps) < self.limit:
            self.steps.append(sample)
            return True
        self.dropped_steps += 1
        first = self.dropped_step_range[0] if self.dropped_step_range else sample.step
        self.dropped_step_range = (first, sample.step)
        return False

    def add_decision(self, decision: DecisionRecord) -> bool:
        if len(self.decisions) < self.limit:
            self.decisions.append(decision)
            return True
        self.dropped_decisions += 1
        return False

    @property
    def empty(self) -> bool:
        return not (self.steps or self.decisions or self.events or self.meta)

    def committed(self) -> None:
        """Everything held was written: start empty (the drop counters stay for their report)."""
        self.steps, self.decisions, self.events, self.meta = [], [], [], {}

    def take_dropped(self) -> str | None:
        """What was dropped since the last call, in words (None: nothing), and reset the counts."""
        parts = []
        if self.dropped_steps:
            first, last = self.dropped_step_range or (0, 0)
            parts.append(f"{self.dropped_steps} step samples (steps {first}..{last})")
        if self.dropped_decisions:
            parts.append(f"{self.dropped_decisions} policy verdicts")
        self.dropped_steps, self.dropped_step_range, self.dropped_decisions = 0, None, 0
        return " and ".join(parts) or None

    def describe(self) -> str:
        """What waits, in words: for the log when it cannot be written."""
        seqs = f" (seq {self.events[0].seq}..{self.events[-1].seq})" if self.events else ""
        meta = f", meta {', '.join(sorted(self.meta))}" if self.meta else ""
        return (
            f"{len(self.steps)} step samples, {len(self.decisions)} verdicts, "
            f"{len(self.events)} events{seqs}{meta}"
        )
