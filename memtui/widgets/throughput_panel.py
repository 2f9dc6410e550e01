"""Throughput: tokens/s now, average and peak, step time, and a chart over the chosen window."""

from __future__ import annotations

from memtui.chart import render_chart
from memtui.formatting import format_duration, format_rate
from memtui.run_view import RunView
from memtui.series import WINDOW_LABELS
from memtui.widgets.panel import Panel

TEXT_LINES = 2
BASELINE = 0.8
"""The chart starts at this fraction of the lowest rate shown."""


def render_throughput(view: RunView, width: int, height: int, now: float) -> str:
    """Two lines of figures, then a tokens/s chart in the remaining ``height`` lines."""
    s = view.sample
    lines = [
        f"[$text-muted]now[/] [b]{format_rate(s.tokens_per_s if s else None)}[/b]"
        f"  [$text-muted]avg[/] {format_rate(view.tokens_per_s_avg)}"
        f"  [$text-muted]peak[/] {format_rate(view.tokens_per_s_peak)}",
        f"[$text-muted]step time[/] {format_duration(s.step_time_s if s else None)}"
        f"  [$text-muted]mean[/] {format_duration(view.seconds_per_step)}",
    ]
    chart_rows = height - len(lines) - 1
    if chart_rows >= 1:
        label = f"tokens/s, {WINDOW_LABELS[view.window]}" + (
            " (reading…)" if view.window != "live" and view.window_points is None else ""
        )
        lines.append(f"[$text-muted]{label[:width]:─<{width}}[/]")
        values = [p.tokens_per_s for p in view.chart_points(now, width)]
        bottom = BASELINE * min(values, default=0.0)  # show the variation, not a wall of full bars
        lines.extend(f"[$primary]{row}[/]" for row in render_chart(values, width, chart_rows, bottom=bottom))
    return "\n".join(lines)


class ThroughputPanel(Panel):
    """Tokens per second and step time, with their history."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Throughput", id=id)

    def draw(self, view: RunView, now: float) -> str:
        size = self.content_size
        return render_throughput(view, size.width, size.height, now)
