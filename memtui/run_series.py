"""A run's curves and happenings over wall time, read from its store for a page to draw:
the step series (``SERIES``) downsampled to at most two points per time bucket (each
bucket's lowest and highest, in time order, so a spike survives), the evals' loss, and the
events a reader looks for on the time axis (``MARK_KINDS``), each with the step the run had
reached when it happened.

Reads the store read-only with one SQL query over the needed columns (100,000 steps in well
under a second); a NULL figure (a non-finite loss, a field a trainer did not report) is a
gap, not a point. Torch-free.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.domain import Event
from engine.events import DirectiveApplied, MemoryAdapted, RunStarted
from engine.run.reports.eval_history import stored_evals
from engine.run.storage.store import Store

BUCKETS = 600
"""Time buckets across the run: at most 2 x BUCKETS points per series, whatever its length."""
SERIES: dict[str, str] = {
    "loss": "loss",
    "tokens/s": "tokens_per_s",
    "allocated": "mem_allocated",
    "reserved": "mem_reserved",
    "budget": "mem_budget",
    "loss scale": "loss_scale",
}
"""Series name -> ``TelemetrySample`` field (a column of the store's ``steps``)."""
EVAL_LOSS = "eval loss"
"""The series of the evals' held-out loss (every eval: there are few)."""


@dataclass(frozen=True)
class Point:
    ts: float
    """Unix seconds."""
    step: int
    value: float


@dataclass(frozen=True)
class MarkKind:
    """One kind of happening marked on the time axis."""

    label: str
    """What the page calls it (also its CSS class: ``mark-<label>``)."""
    event_types: tuple[str, ...]
    keeps: Callable[[Event], bool] = lambda event: True
    """Which events of those types it marks."""


def _is_oom_adaptation(event: Event) -> bool:
    adapted = MemoryAdapted.of(event)
    return event.type != MemoryAdapted.event_type or (adapted is not None and adapted.kind == "oom")


def _is_restart(event: Event) -> bool:
    """A trainer restart, or a supervisor bringing back a run whose whole tree died."""
    started = RunStarted.of(event)
    return event.type != RunStarted.event_type or (started is not None and started.after_whole_tree_death)


def _is_apply(event: Event) -> bool:
    applied = DirectiveApplied.of(event)
    return applied is not None and not applied.resend  # a restart's re-send applies nothing new


MARK_KINDS: tuple[MarkKind, ...] = (
    MarkKind("chaos", ("chaos_injected",)),
    MarkKind("restart", ("trainer_restarted", "run_started"), _is_restart),
    MarkKind("oom", ("memory_adapted", "memory_exhausted"), _is_oom_adaptation),
    MarkKind("rollback", ("rolled_back",)),
    MarkKind("directive", ("directive_applied",), _is_apply),
)
"""Every kind of mark, in the order a legend lists them."""


def mark_kind(event: Event) -> MarkKind | None:
    """The kind of mark ``event`` gets, or None for an event the page does not mark."""
    return next((k for k in MARK_KINDS if event.type in k.event_types and k.keeps(event)), None)


@dataclass(frozen=True)
class Mark:
    seq: int
    """The event's sequence number in the store."""
    ts: float
    step: int
    """The newest step stored before it (0 before the first)."""
    kind: str
    """``MarkKind.label``."""
    text: str
    """The event's message (its type when it has none)."""


@dataclass(frozen=True)
class RunSeries:
    """What a page draws of one run."""

    start: float
    """Unix seconds of the first step (or event); the time axis starts there."""
    end: float
    steps_stored: int
    """Samples in the store (every attempt's), before downsampling."""
    series: dict[str, list[Point]] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)
    clock: list[tuple[float, int]] = field(default_factory=list)
    """(ts, step) of the first sample and of each time bucket's newest, in time order."""

    def step_at(self, ts: float) -> int:
        """The step stored at or before ``ts``, to a bucket's width (0 before any)."""
        i = bisect.bisect_right(self.clock, (ts, float("inf")))
        return self.clock[i - 1][1] if i else 0


def read_series(store: Store, buckets: int = BUCKETS) -> RunSeries:
    """The run in ``store`` as curves and marks; empty series for a run with no step."""
    have = {row[1] for row in store.query("PRAGMA table_info(steps)")}
    columns = ", ".join(c if c in have else "NULL" for c in ("ts", "step", *SERIES.values()))
    rows = store.query(f"SELECT {columns} FROM steps ORDER BY id")
    events = _all_events(store)
    times = [r[0] for r in rows] or [e.ts for e in events] or [0.0]
    start, end = min(times), max(times)
    width = max(end - start, 1e-9) / buckets
    series = {
        name: _downsample(
            [(r[0], r[1], r[i + 2]) for r in rows if r[i + 2] is not None], start, width, buckets
        )
        for i, name in enumerate(SERIES)
    }
    series[EVAL_LOSS] = [Point(e.ts, e.result.step, e.result.loss) for e in stored_evals(store)]
    ts_steps = sorted((r[0], r[1]) for r in rows)
    newest = {min(int((ts - start) / width), buckets - 1): (ts, step) for ts, step in ts_steps}
    clock = ts_steps[:1] + list(newest.values())
    return RunSeries(start, end, len(rows), series, _marks(events, ts_steps), clock)


def _downsample(
    points: list[tuple[float, int, float]], start: float, width: float, buckets: int
) -> list[Point]:
    """Each time bucket's lowest and highest point, in time order (both once when one)."""
    kept: dict[int, tuple[tuple[float, int, float], tuple[float, int, float]]] = {}
    for point in points:
        bucket = min(int((point[0] - start) / width), buckets - 1)  # the newest point: the last bucket
        low, high = kept.get(bucket, (point, point))
        kept[bucket] = (point if point[2] < low[2] else low, point if point[2] > high[2] else high)
    out: list[Point] = []
    for low, high in kept.values():
        pair = sorted({low, high})
        out += [Point(ts, step, float(value)) for ts, step, value in pair]
    return sorted(out, key=lambda p: p.ts)


def _all_events(store: Store) -> list[Event]:
    events: list[Event] = []
    while page := store.events_since(events[-1].seq if events else 0, 5000):
        events += page
    return events


def _marks(events: list[Event], ts_steps: list[tuple[float, int]]) -> list[Mark]:
    marks = []
    for event in events:
        kind = mark_kind(event)
        if kind is None:
            continue
        i = bisect.bisect_right(ts_steps, (event.ts, float("inf")))
        step = ts_steps[i - 1][1] if i else 0
        marks.append(Mark(event.seq, event.ts, step, kind.label, event.message or event.type))
    return marks
