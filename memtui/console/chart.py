"""Text charts: a series of numbers as rows of block characters, for panels to embed.

Pure: ``render_chart(values, width, height)`` returns ``height`` strings of ``width``
cells; the newest value is on the right. Missing values (None, NaN) are blank columns.
``render_rule`` is the line above a chart: its label, a rule, and a mark over each column
where a restarted trainer's first step is drawn. ``render_scaled`` is a whole chart as a
panel shows it: the rule, then rows scaled to the data's own range with the range's ends
(the lowest and highest value shown) as y-axis labels in a left gutter, and a flat series
said to be flat rather than drawn as a wall of equal bars.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

BLOCKS = " ▁▂▃▄▅▆▇█"
RESTART_MARK = "↻"
_LEVELS = len(BLOCKS) - 1
FLAT_SPAN = 0.002
"""A series whose highest and lowest values differ by less than this fraction of the highest
is flat: scaled to its own range it would only magnify noise."""
FLOOR_SHARE = 0.1
"""The lowest value is drawn this fraction of the chart's height above its floor, so it shows."""
MIN_PLOT_WIDTH = 8
"""Columns the data keeps; below it the y-axis labels go into the rule instead of a gutter."""


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


Series = Callable[[int], tuple[Sequence[float | None], Sequence[int]]]
"""A chart's data for a plot ``width`` columns wide: its values (the newest on the right) and
the columns where a restart is drawn."""


def render_scaled(
    label: str, series: Series, width: int, height: int, *, style: str, fmt: Callable[[float], str]
) -> str:
    """Markup of ``height`` lines, ``width`` cells: the rule (``label``), then the chart of
    ``series`` scaled from just under its lowest value to its highest, with those two
    (``fmt``-ed) as labels on the top and bottom rows of a left gutter (the plot is narrower
    by the gutter, and its series is asked for again at that width). A flat series is one
    level line, labelled ``flat at X`` in the rule."""
    if height < 2 or width < 1:
        return ""
    values, marks = series(width)
    finite = [v for v in values[-width:] if v is not None and math.isfinite(v)]
    rows = height - 1
    if not finite:
        return "\n".join([render_rule(label, width, marks), *[" " * width] * rows])
    lo, hi = min(finite), max(finite)
    if hi - lo <= FLAT_SPAN * max(abs(hi), abs(lo)):
        return _render_flat(f"{label}, flat at {fmt(hi)}", values, marks, width, rows, style)
    top_label, bottom_label = fmt(hi), fmt(lo)
    gutter = max(len(top_label), len(bottom_label)) + 1
    if rows < 2 or width - gutter < MIN_PLOT_WIDTH:
        gutter, label = 0, f"{label} {bottom_label}–{top_label}"
    else:
        values, marks = series(width - gutter)
    plot = width - gutter
    floor = lo - (hi - lo) * FLOOR_SHARE / (1 - FLOOR_SHARE)
    drawn = render_rows(render_chart(values, plot, rows, top=hi, bottom=floor), style, marks)
    axis = [top_label if i == 0 else bottom_label if i == rows - 1 else "" for i in range(rows)]
    if gutter:
        drawn = [f"[$text-muted]{a:>{gutter - 1}} [/]{row}" for a, row in zip(axis, drawn, strict=True)]
    return "\n".join([render_rule(label, width, [m + gutter for m in marks]), *drawn])


def _render_flat(
    label: str, values: Sequence[float | None], marks: Sequence[int], width: int, rows: int, style: str
) -> str:
    """A flat series: a level line (▄) in the middle row where there are values, blank rows
    around it; the rule says it is flat and at what."""
    line = "".join(
        " " if v is None or not math.isfinite(v) else BLOCKS[_LEVELS // 2] for v in resample(values, width)
    )
    middle = (rows - 1) // 2
    drawn = [line if i == middle else " " * width for i in range(rows)]
    return "\n".join([render_rule(label, width, marks), *render_rows(drawn, style, marks)])
