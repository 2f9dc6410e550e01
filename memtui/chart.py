"""Text charts: a series of numbers as rows of block characters, for panels to embed.

Pure: ``render_chart(values, width, height)`` returns ``height`` strings of ``width``
cells; the newest value is on the right. Missing values (None, NaN) are blank columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BLOCKS = " ▁▂▃▄▅▆▇█"
_LEVELS = len(BLOCKS) - 1


def resample(values: Sequence[float | None], width: int) -> list[float | None]:
    """Exactly ``width`` values: the newest ones, left-padded with None (the chart grows from the right)."""
    tail = list(values[-width:]) if width > 0 else []
    return [None] * (width - len(tail)) + tail


def render_chart(
    values: Sequence[float | None],
    width: int,
    height: int = 1,
    *,
    top: float | None = None,
    bottom: float = 0.0,
) -> list[str]:
    """Rows (top first) of a column chart from ``bottom`` to ``top`` (default: the largest value)."""
    if width < 1 or height < 1:
        return []
    column = resample(values, width)
    finite = [v for v in column if v is not None and math.isfinite(v)]
    ceiling = (top if top is not None else max(finite, default=0.0)) - bottom
    rows = [[" "] * width for _ in range(height)]
    for x, value in enumerate(column):
        if value is None or not math.isfinite(value) or ceiling <= 0:
            continue
        eighths = round(max(0.0, min(1.0, (value - bottom) / ceiling)) * height * _LEVELS)
        if value > bottom:
            eighths = max(1, eighths)  # a small non-zero value still shows
        for row in range(height):
            level = min(_LEVELS, max(0, eighths - row * _LEVELS))
            rows[height - 1 - row][x] = BLOCKS[level]
    return ["".join(r) for r in rows]
