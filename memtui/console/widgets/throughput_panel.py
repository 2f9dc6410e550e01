"""Throughput: tokens/s now, the run's average and peak, step time, and a chart over the
chosen window; once the run has ended, its final figures instead of live ones.

"avg" and "peak" are the whole run's (every attempt, read from the store: the supervisor's
figures, ``memtui status``'s), so a console attached late or again shows the same ones; until
the store has been read they are the console's own, labelled with what they cover.
"""

from __future__ import annotations

from engine.domain import TelemetrySample
from engine.events import TrainerStarted
from engine.measures.utilisation import above_peak, credible_mfu
from memtui.console.chart import render_scaled
from memtui.console.run_view import RunView
from memtui.console.series import WINDOW_LABELS, restart_columns
from memtui.console.widgets.panel import Panel
from memtui.formatting import format_count, format_duration, format_percent, format_rate


def render_throughput(view: RunView) -> str:
    """Three lines: tokens/s and step time now (or how the run ended); the run's average and
    peak tokens/s; the wall time per step, and the current attempt's figures once there are several."""
    s = view.sample
    if view.finished and s is not None:
        first = f"[b]{view.state}[/b] at step {s.step}, ran {format_duration(view.ran_s())}"
    else:
        first = (
            f"[$text-muted]now[/] [b]{format_rate(s.tokens_per_s if s else None)}[/b]"
            f"  [$text-muted]step[/] {format_duration(s.step_time_s if s else None)}"
        )
        if s is not None and s.data_wait_s is not None and s.step_time_s > 0:
            first += f"  [$text-muted]data wait[/] {format_percent(s.data_wait_s / s.step_time_s)}"
    return "\n".join([first, _average_line(view), _attempt_line(view)])


def _average_line(view: RunView) -> str:
    """The run's average and peak (a peak is its best window of steps), else the console's own."""
    run = view.run_throughput
    avg: float | None
    if run is not None and run.run_avg_tokens_per_s is not None:
        avg, peak, scope = run.run_avg_tokens_per_s, run.run_peak_tokens_per_s, "run"
    else:
        avg, peak, scope = view.tokens_per_s_avg, view.tokens_per_s_peak, "so far"
    return (
        f"[$text-muted]avg[/] {format_count(avg)}  [$text-muted]peak[/] {format_rate(peak)}"
        f" [$text-muted]({scope})[/]"
    )


def render_mfu(view: RunView) -> str:
    """``  MFU 1.2% (measured peak)``: model FLOPs utilisation, where the peak came from; empty
    until a step carries it (an older trainer, or a GPU whose peak is unknown). A step that
    beat the peak reads ``MFU > peak (probe unreliable)``: never an MFU over 100%."""
    s = view.sample
    started = view.started
    source = started.peak_source.split(" ")[0] if started and started.peak_source else None
    if s is not None and _above_peak(s, started):
        why = "probe unreliable" if source == "measured" else f"{source or 'the'} peak too low"
        return f"  [$text-muted]MFU[/] [$warning]> peak[/] [$text-muted]({why})[/]"
    if s is None or s.mfu is None:
        return ""
    label = f" [$text-muted]({source} peak)[/]" if source in ("measured", "config") else ""
    return f"  [$text-muted]MFU[/] {format_percent(s.mfu)}{label}"


def _above_peak(s: TelemetrySample, started: TrainerStarted | None) -> bool:
    """The step's model TFLOP/s beat the peak (an older trainer still sent its MFU over 1)."""
    if s.mfu is not None:
        return credible_mfu(s.mfu) is None
    return started is not None and above_peak(s.model_tflops, started.peak_tflops, started.world_size)


def _attempt_line(view: RunView) -> str:
    # wall time per step over the attempt (saves, evals and waits included): "step" above is
    # the newest step's own time, and "mean step" read as its mean, which it is not
    line = f"[$text-muted]wall/step[/] {format_duration(view.seconds_per_step)}{render_mfu(view)}"
    run = view.run_throughput
    if run is None or run.attempt < 2 or run.attempt_avg_tokens_per_s is None:
        return line
    return f"{line}  [$text-muted]attempt {run.attempt} avg[/] {format_count(run.attempt_avg_tokens_per_s)}"


def render_throughput_chart(view: RunView, width: int, height: int, now: float) -> str:
    """A labelled tokens/s chart over the chosen window, ``height`` lines in all."""
    if height < 2 or width < 1:
        return ""
    label = f"tokens/s, {WINDOW_LABELS[view.window]}" + (
        " (reading…)" if view.window != "live" and view.window_points is None else ""
    )

    def series(plot: int) -> tuple[list[float], list[int]]:
        points = view.chart_points(now, plot)
        return [p.tokens_per_s for p in points], restart_columns(points, plot)

    return render_scaled(label, series, width, height, style="$primary", fmt=format_count)


class ThroughputPanel(Panel):
    """Tokens per second and step time, with their history."""

    HAS_CHART = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Throughput", id=id)

    def draw(self, view: RunView, now: float) -> str:
        return render_throughput(view)

    def draw_chart(self, view: RunView, now: float, width: int, height: int) -> str:
        return render_throughput_chart(view, width, height, now)
