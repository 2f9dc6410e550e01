"""The longer chart windows (last hour, whole run), read back from the run's store.

Blocking SQLite reads: the app calls ``read_window`` from a worker thread, never on the
event loop. Steps are read in pages and folded into at most ``buckets`` points as they
come, so a whole run of millions of steps costs a few hundred points of memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from engine.store import Store
from memtui.series import WINDOW_SECONDS, ChartWindow, Point, downsample, point_of

PAGE_ROWS = 5000
DEFAULT_BUCKETS = 240
"""Points a long window is folded into (wider than any chart)."""


def read_window(
    store_path: Path, window: ChartWindow, now: float, buckets: int = DEFAULT_BUCKETS
) -> list[Point]:
    """Downsampled points of ``window`` ending at ``now``; empty if there is no store yet."""
    if not Path(store_path).exists():
        return []
    with Store(Path(store_path), readonly=True) as store:
        latest = store.latest_step()
        if latest is None:
            return []
        seconds = WINDOW_SECONDS[window]
        since = _first_step_guess(latest.step, latest.step_time_s, seconds)
        points = (p for p in _points(store, since) if seconds is None or p.ts >= now - seconds)
        return downsample(points, buckets, since + 1, latest.step)


def _first_step_guess(latest_step: int, step_time_s: float, seconds: float | None) -> int:
    """The step before the window starts, from the newest pace (with 50% to spare)."""
    if seconds is None or step_time_s <= 0:
        return 0
    return max(0, latest_step - math.ceil(1.5 * seconds / step_time_s))


def _points(store: Store, since: int) -> Iterator[Point]:
    cursor = since
    while True:
        page = store.steps(since_step=cursor, limit=PAGE_ROWS)
        if not page:
            return
        for sample in page:
            yield point_of(sample)
        cursor = max(cursor, page[-1].step)
        if len(page) < PAGE_ROWS:
            return
