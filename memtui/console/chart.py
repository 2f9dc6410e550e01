"""Text charts: a series of numbers as rows of block characters, for panels to embed.

Pure: ``render_chart(values, width, height)`` returns ``height`` strings of ``width``
cells; the newest value is on the right. Missing values (None, NaN) are blank columns.
``render_rule`` is the line above a chart: its label, a rule, and a mark over each column
where a restarted trainer's first step is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BLOCKS = " ▁▂▃▄▅▆▇█"
RESTART_MARK = "↻"
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


def render_rule(label: str, width: int, marks: Sequence[int] = ()) -> str:
    """Markup of ``width`` cells: ``label`` then a rule (muted), with RESTART_MARK (warning
    colour) over each column in ``marks`` that the label leaves free (``render_rows`` colours
    those columns below it). ``label`` is plain text."""
    at = sorted({x for x in marks if 0 <= x < width})
    if at:
        label = f"{label} ({RESTART_MARK} restart)"
    cells = f"{label[:width]:─<{width}}"
    return _marked(cells, "$text-muted", [x for x in at if x >= len(label)], RESTART_MARK)


def render_rows(rows: Sequence[str], style: str, marks: Sequence[int] = ()) -> list[str]:
    """Chart rows as markup in ``style``; the columns in ``marks`` (a restart) in the warning colour."""
    return [_marked(row, style, marks) for row in rows]


def _marked(cells: str, style: str, marks: Sequence[int], mark: str | None = None) -> str:
    """``cells`` in ``style``, the cells at ``marks`` in the warning colour (replaced by ``mark``)."""
    parts, start = [], 0
    for x in sorted({x for x in marks if 0 <= x < len(cells)}):
        if x > start:
            parts.append(f"[{style}]{cells[start:x]}[/]")
        parts.append(f"[$text-warning]{mark or cells[x]}[/]")
        start = x + 1
    if start < len(cells):
        parts.append(f"[{style}]{cells[start:]}[/]")
    return "".join(parts)
