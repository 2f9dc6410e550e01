"""The longer chart windows (last hour, whole run), read back from the run's store.

Blocking SQLite reads: the app calls ``read_window`` from a worker thread, never on the
event loop. Samples are read in the order they were recorded (keyset pages on the row id,
from the first one inside the window) and folded into about ``buckets`` points as they come,
so a whole run of millions of steps costs a few hundred points of memory. Arrival order
keeps a resumed attempt's repeated steps: the chart shows attempt 1 up to its last step,
then the restart, then attempt 2 from the step it resumed at.
"""

from __future__ import annotations

from pathlib import Path

from engine.run.store import Store
from memtui.console.series import WINDOW_SECONDS, ChartWindow, Point, downsample, point_of

PAGE_ROWS = 5000
DEFAULT_BUCKETS = 240
"""Points a long window is folded into (wider than any chart)."""


def read_window(
    store_path: Path, window: ChartWindow, now: float, buckets: int = DEFAULT_BUCKETS
) -> list[Point]:
    """Downsampled points of ``window`` ending at ``now`` (Unix time); empty if there is no store yet."""
    if not Path(store_path).exists():
        return []
    seconds = WINDOW_SECONDS[window]
    since = None if seconds is None else now - seconds
    with Store(Path(store_path), readonly=True) as store:
        total = store.count_steps(since_ts=since)
        samples = store.iter_steps(PAGE_ROWS, since_ts=since)
        return downsample((point_of(s) for s in samples), buckets, total)
