"""Chart series: the few numbers per step a chart needs, windowed and downsampled.

``Point`` is what a chart draws from (a full ``TelemetrySample`` is ~30 fields; a chart
needs six). ``downsample`` folds any number of points into at most ``buckets`` in the order
they were recorded, streaming, so a whole multi-day run read back from the store costs one
pass and a few hundred points of memory. Arrival order, not step number: a resumed attempt
repeats the steps after its checkpoint, and both attempts' values stay on the chart, one
after the other, with the restart between them (``restart_columns`` marks it). Pure
functions of their inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from engine.domain import Event, TelemetrySample
from engine.events import EvalCompleted

ChartWindow = Literal["live", "hour", "run"]
"""live: the newest minutes, from telemetry as it arrives; hour and run: read from the store."""
WINDOWS: tuple[ChartWindow, ...] = ("live", "hour", "run")
WINDOW_SECONDS: dict[ChartWindow, float | None] = {"live": 300.0, "hour": 3600.0, "run": None}
WINDOW_LABELS: dict[ChartWindow, str] = {"live": "last 5 min", "hour": "last hour", "run": "whole run"}
LIVE_POINTS = 3000
"""Newest points kept in memory for the live window (5 min at the ~10 Hz telemetry rate)."""
MAX_EVALS = 500
"""Newest evals kept for the eval-loss chart (a chart is narrower than this)."""


def evals_after(event: Event, evals: tuple[EvalCompleted, ...]) -> tuple[EvalCompleted, ...]:
    """The evals with ``event``'s appended if it is one (the newest MAX_EVALS)."""
    done = EvalCompleted.of(event)
    return evals if done is None else (*evals, done)[-MAX_EVALS:]


@dataclass(frozen=True)
class Point:
    """One step (or a bucket of steps) as a chart sees it. Bytes, seconds, tokens/s."""

    step: int
    ts: float
    tokens_per_s: float
    step_time_s: float
    loss: float
    mem_allocated: int
    mem_reserved: int
    overflow: bool = False
    attempt: int = 1
    """Trainer attempt (1 + restarts) whose step(s) these are."""
    metrics: Mapping[str, float] | None = None
    """The workload's own metrics (name -> value) of the step, or their means over a bucket."""


def point_of(sample: TelemetrySample) -> Point:
    return Point(
        step=sample.step,
        attempt=sample.attempt,
        ts=sample.ts,
        tokens_per_s=sample.tokens_per_s,
        step_time_s=sample.step_time_s,
        loss=sample.loss,
        mem_allocated=sample.mem_allocated,
        mem_reserved=sample.mem_reserved,
        overflow=sample.overflow,
        metrics=sample.metrics,
    )


def within(points: Sequence[Point], now: float, seconds: float | None) -> list[Point]:
    """The points no older than ``seconds`` before ``now`` (all of them for None)."""
    if seconds is None:
        return list(points)
    return [p for p in points if p.ts >= now - seconds]


def downsample(points: Iterable[Point], buckets: int, total: int) -> list[Point]:
    """At most about ``buckets`` points from ``total`` points in the order they were recorded.

    Consecutive points fold into one bucket (``total / buckets`` of them); a bucket never
    spans a restart (a new attempt starts a new one, so there may be a few more than
    ``buckets``). Each holds the mean rate, step time and loss of its steps (NaN losses
    skipped), the highest memory (a spike must survive downsampling), whether any step
    overflowed and the mean of each workload metric over the steps that reported it; it is
    stamped with its last step.
    """
    if buckets < 1 or total < 1:
        return []
    out: list[Point] = []
    bucket: _Bucket | None = None
    key: tuple[int, int] | None = None
    for position, p in enumerate(points):
        here = (min(position, total - 1) * buckets // total, p.attempt)
        if bucket is None or here != key:
            if bucket is not None:
                out.append(bucket.point())
            bucket, key = _Bucket(), here
        bucket.add(p)
    if bucket is not None:
        out.append(bucket.point())
    return out


def restart_columns(points: Sequence[Point], width: int) -> list[int]:
    """Columns (0..width-1, newest point on the right) where a chart of the newest ``width``
    points shows the first point of a new attempt."""
    shown = list(points[-width:]) if width > 0 else []
    offset = width - len(shown)
    return [offset + i for i in range(1, len(shown)) if shown[i].attempt != shown[i - 1].attempt]


class _Bucket:
    __slots__ = ("n", "rate", "time", "loss", "losses", "alloc", "reserved", "overflow", "last", "metrics")

    def __init__(self) -> None:
        self.n = self.losses = 0
        self.rate = self.time = self.loss = 0.0
        self.alloc = self.reserved = 0
        self.overflow = False
        self.last: Point | None = None
        self.metrics: dict[str, tuple[float, int]] = {}  # name -> (sum, steps that reported it)

    def add(self, p: Point) -> None:
        self.n += 1
        self.rate += p.tokens_per_s
        self.time += p.step_time_s
        if math.isfinite(p.loss):
            self.loss += p.loss
            self.losses += 1
        self.alloc = max(self.alloc, p.mem_allocated)
        self.reserved = max(self.reserved, p.mem_reserved)
        self.overflow = self.overflow or p.overflow
        self.last = p  # points come in the order they were recorded
        for name, value in (p.metrics or {}).items():
            total, count = self.metrics.get(name, (0.0, 0))
            self.metrics[name] = (total + value, count + 1)

    def point(self) -> Point:
        assert self.last is not None
        return Point(
            step=self.last.step,
            ts=self.last.ts,
            tokens_per_s=self.rate / self.n,
            step_time_s=self.time / self.n,
            loss=self.loss / self.losses if self.losses else math.nan,
            mem_allocated=self.alloc,
            mem_reserved=self.reserved,
            overflow=self.overflow,
            attempt=self.last.attempt,
            metrics={name: total / count for name, (total, count) in self.metrics.items()} or None,
        )
