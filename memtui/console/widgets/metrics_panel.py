"""Metrics: the workload's own scalars (accuracy, perplexity, ...), one row each: the name,
its newest value and a sparkline of its history over the chart window.

A workload reports them by returning ``(loss, {name: value})`` from its forward; a run
whose workload reports none shows how to, in one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from memtui.console.chart import render_chart
from memtui.console.run_view import RunView
from memtui.console.series import Point
from memtui.console.widgets.panel import Panel
from memtui.formatting import format_float

NONE_YET = "[$text-muted]none yet: a forward[/]\n[$text-muted]may return[/] (loss, {name: value})"
"""What the panel says while the run has none: how a workload reports one (the first line
fits 80x24's panel; key z maximises it to read the second whole)."""
NAME_WIDTH = (6, 18)
"""Fewest and most cells a name gets; a longer one is cut with an ellipsis."""
SPARK_MIN = 4
"""Below this many cells left for it, a row has no sparkline."""


def metric_names(points: Sequence[Point]) -> list[str]:
    """Every name the points carry, in the order first reported."""
    names: dict[str, None] = {}
    for p in points:
        names.update(dict.fromkeys(p.metrics or ()))
    return list(names)


def newest_value(points: Sequence[Point], name: str) -> float | None:
    """The newest point's value of ``name`` (a step may have reported others only)."""
    for p in reversed(points):
        if p.metrics and name in p.metrics:
            return p.metrics[name]
    return None


def sparkline(points: Sequence[Point], name: str, width: int) -> str:
    """One row of ``width`` cells, the newest value on the right, scaled to the shown range."""
    values = [p.metrics.get(name) if p.metrics else None for p in points[-width:]]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite or width < 1:
        return " " * max(width, 0)
    low, high = min(finite), max(finite)
    span = high - low or abs(high) or 1.0  # a flat series: a level line halfway
    return render_chart(values, width, 1, top=high, bottom=low - span)[0]


def render_metrics(points: Sequence[Point], width: int) -> str:
    """A ``name value sparkline`` row per metric in ``width`` cells, or how to report one.
    Names are identifiers (``engine.measures.user_metrics.NAME_PATTERN``): no markup in them. A narrow
    panel cuts names to leave the sparkline its ``SPARK_MIN`` cells."""
    names = metric_names(points)
    if not names:
        return NONE_YET
    values = {name: format_float(newest_value(points, name)) for name in names}
    value_width = max(len(v) for v in values.values())
    room = width - value_width - 2 - SPARK_MIN  # what a name may take with the sparkline kept
    name_width = max(NAME_WIDTH[0], min(NAME_WIDTH[1], room, max(len(n) for n in names)))
    spark_width = width - name_width - value_width - 2
    rows = []
    for name in names:
        label = name if len(name) <= name_width else name[: name_width - 1] + "…"
        row = f"[$text-muted]{label:<{name_width}}[/] [b]{values[name]:>{value_width}}[/b]"
        if spark_width >= SPARK_MIN:
            row += f" [$primary]{sparkline(points, name, spark_width)}[/]"
        rows.append(row)
    return "\n".join(rows)


class MetricsPanel(Panel):
    """The workload's own metrics of the newest steps, with their history."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Metrics", id=id)

    def draw(self, view: RunView, now: float) -> str:
        return render_metrics(view.chart_points(now), self.content_size.width)
