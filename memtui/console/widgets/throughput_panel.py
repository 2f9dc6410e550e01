"""Throughput: tokens/s now, average and peak, step time, and a chart over the chosen window."""

from __future__ import annotations

from memtui.console.chart import render_chart, render_rows, render_rule
from memtui.console.run_view import RunView
from memtui.console.series import WINDOW_LABELS, restart_columns
from memtui.console.widgets.panel import Panel
from memtui.formatting import format_duration, format_percent, format_rate

BASELINE = 0.8
"""The chart starts at this fraction of the lowest rate shown."""


def render_throughput(view: RunView) -> str:
    """Two lines of figures: tokens/s now, average and peak (this attempt); step time now and
    mean; and, once the store shows more than one attempt, a third: the whole run's average
    and peak (with one attempt they are the attempt's, and the line would only repeat it)."""
    s = view.sample
    text = (
        f"[$text-muted]now[/] [b]{format_rate(s.tokens_per_s if s else None)}[/b]"
        f"  [$text-muted]avg[/] {format_rate(view.tokens_per_s_avg)}"
        f"  [$text-muted]peak[/] {format_rate(view.tokens_per_s_peak)}\n"
        f"[$text-muted]step time[/] {format_duration(s.step_time_s if s else None)}"
        f"  [$text-muted]mean[/] {format_duration(view.seconds_per_step)}{render_mfu(view)}"
    )
    run = view.run_throughput
    if run is None or run.run_avg is None or run.attempt < 2:
        return text
    attempts = f"{run.attempt} attempts"
    return (
        f"{text}\n[$text-muted]run avg[/] {format_rate(run.run_avg)}"
        f"  [$text-muted]peak[/] {format_rate(run.run_peak)}  [$text-muted]({attempts})[/]"
    )


def render_mfu(view: RunView) -> str:
    """``  MFU 1.2% (measured peak)``: model FLOPs utilisation, where the peak came from; empty
    until a step carries it (an older trainer, or a GPU whose peak is unknown)."""
    s = view.sample
    if s is None or s.mfu is None:
        return ""
    started = view.started
    source = started.peak_source.split(" ")[0] if started and started.peak_source else None
    label = f" [$text-muted]({source} peak)[/]" if source in ("measured", "config") else ""
    return f"  [$text-muted]MFU[/] {format_percent(s.mfu)}{label}"


def render_throughput_chart(view: RunView, width: int, height: int, now: float) -> str:
    """A labelled tokens/s chart over the chosen window, ``height`` lines in all."""
    if height < 2 or width < 1:
        return ""
    label = f"tokens/s, {WINDOW_LABELS[view.window]}" + (
        " (reading…)" if view.window != "live" and view.window_points is None else ""
    )
    points = view.chart_points(now, width)
    values = [p.tokens_per_s for p in points]
    bottom = BASELINE * min(values, default=0.0)  # show the variation, not a wall of full bars
    rows = render_chart(values, width, height - 1, bottom=bottom)
    marks = restart_columns(points, width)
    return "\n".join([render_rule(label, width, marks), *render_rows(rows, "$primary", marks)])


class ThroughputPanel(Panel):
    """Tokens per second and step time, with their history."""

    HAS_CHART = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Throughput", id=id)

    def draw(self, view: RunView, now: float) -> str:
        return render_throughput(view)

    def draw_chart(self, view: RunView, now: float, width: int, height: int) -> str:
        return render_throughput_chart(view, width, height, now)
