"""The longer chart windows (last hour, whole run), folded from the run's stored steps.

Blocking: the app calls ``read_window`` from a worker thread, never on the event loop. The
data layer (``memtui.history.stored_steps``) streams the steps in the order they were
recorded, from the first one inside the window, in keyset pages; they are folded into about
``buckets`` points as they come, so a whole run of millions of steps costs a page and a few
hundred points of memory. Arrival order keeps a resumed attempt's repeated steps: the chart
shows attempt 1 up to its last step, then the restart, then attempt 2 from the step it
resumed at.
"""

from __future__ import annotations

from pathlib import Path

from memtui.console.series import WINDOW_SECONDS, ChartWindow, Point, downsample, point_of
from memtui.history import stored_steps

DEFAULT_BUCKETS = 240
"""Points a long window is folded into (wider than any chart)."""


def read_window(
    store_path: Path, window: ChartWindow, now: float, buckets: int = DEFAULT_BUCKETS
) -> list[Point]:
    """Downsampled points of ``window`` ending at ``now`` (Unix time); empty if there is no store yet."""
    seconds = WINDOW_SECONDS[window]
    with stored_steps(store_path, since_ts=None if seconds is None else now - seconds) as steps:
        return downsample((point_of(s) for s in steps.samples), buckets, steps.total)
