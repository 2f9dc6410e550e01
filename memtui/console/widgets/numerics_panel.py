"""Numerics: loss raw and smoothed, the newest eval loss, lr, grad norm, and the fp16 loss
scale with its alerts; under them the train-loss chart and, once there are evals, the
eval-loss chart beside it."""

from __future__ import annotations

import math

from memtui.console.chart import render_scaled
from memtui.console.run_view import RunView
from memtui.console.series import WINDOW_LABELS, restart_columns
from memtui.console.widgets.panel import Panel
from memtui.formatting import format_float, format_loss, format_scale

LABEL_WIDTH = 10
EVAL_CHART_SHARE = 0.4
"""Share of the chart width the eval-loss chart takes (one point per eval, far fewer than steps)."""
MIN_EVAL_CHART = 12
"""Columns the eval-loss chart keeps however narrow the panel (its label and a few evals)."""


def render_numerics(view: RunView, height: int | None = None) -> str:
    """Aligned ``label value`` lines; an alert line in the error colour when one is raised.
    Where more lines than ``height`` would be cut (the compact layout, an eval row, an alert),
    pairs of rows share a line (``PAIRED``), first to last, until they fit."""
    s = view.sample
    rows = [
        ("loss", _loss(s.loss if s else None)),
        ("smoothed", format_loss(view.loss_smoothed)),
        *_eval_rows(view),
        ("lr", format_float(s.lr if s else None, 3)),
        ("grad norm", format_float(s.grad_norm if s else None, 3)),
        *_scale_rows(view),
    ]
    alerts = [f"[$text-error b]▲ {alert}[/]" for alert in view.numerics_alerts()]
    for first, second in PAIRED:
        if height is None or len(rows) + len(alerts) <= height:
            break
        rows = _paired(rows, first, second)
    lines = [f"[$text-muted]{label:<{LABEL_WIDTH}}[/]{value}" for label, value in rows]
    return "\n".join(lines + alerts)


def _paired(rows: list[tuple[str, str]], first: str, second: str) -> list[tuple[str, str]]:
    """``rows`` with the ``second`` row's label and value after the ``first`` row's value."""
    labels = [label for label, _ in rows]
    if first not in labels or second not in labels:
        return rows
    tail = dict(rows)[second]
    return [
        (label, f"{value}  [$text-muted]{second}[/] {tail}" if label == first else value)
        for label, value in rows
        if label != second
    ]


PAIRED = (("lr", "grad norm"), ("loss", "smoothed"), ("scale", "lowest"))
"""Rows that share a line, in this order, where the panel is too short for one each."""


def _eval_rows(view: RunView) -> list[tuple[str, str]]:
    """The newest eval's loss and step; no row before the first eval."""
    if not view.evals:
        return []
    newest = view.evals[-1]
    return [("eval", f"{_loss(newest.loss)} [$text-muted]at step[/] {newest.step}")]


def render_loss_charts(view: RunView, width: int, height: int, now: float) -> str:
    """The train-loss chart over the chosen window; once there are evals, the eval-loss
    chart beside it, a column apart (EVAL_CHART_SHARE of the width: evals are few)."""
    if not view.evals:
        return _train_loss_chart(view, width, height, now)
    right = max(MIN_EVAL_CHART, int((width - 1) * EVAL_CHART_SHARE))
    train = _train_loss_chart(view, width - right - 1, height, now).split("\n")
    evals = render_scaled(
        "eval loss",
        lambda plot: (_widened([e.loss for e in view.evals], plot), []),
        right,
        height,
        style="$secondary",
        fmt=format_loss,
    ).split("\n")
    return "\n".join(f"{a} {b}" for a, b in zip(train, evals, strict=False))


def _widened(values: list[float], width: int) -> list[float]:
    """The newest ``width`` columns, each value repeated to fill them while they are few
    (seven evals as seven bars of a 40-column chart, not seven thin columns at its right)."""
    repeat = max(1, width // max(1, len(values)))
    return [v for v in values for _ in range(repeat)][-width:]


def _train_loss_chart(view: RunView, width: int, height: int, now: float) -> str:
    def series(plot: int) -> tuple[list[float], list[int]]:
        points = view.chart_points(now, plot)
        return [p.loss for p in points], restart_columns(points, plot)

    label = f"loss, {WINDOW_LABELS[view.window]}"
    return render_scaled(label, series, width, height, style="$primary", fmt=format_loss)


def _scale_rows(view: RunView) -> list[tuple[str, str]]:
    s = view.sample
    if s is not None and s.loss_scale is None:
        return [("scale", "[$text-muted]none (bf16/fp32)[/]")]
    overflows = s.overflow_count if s else 0
    skipped = s.skipped_steps if s else 0
    flag = " [$text-error]overflow[/]" if s is not None and s.overflow else ""
    style = "$text-warning" if overflows else "$text"
    return [
        ("scale", format_scale(s.loss_scale if s else None) + flag),
        ("lowest", format_scale(view.loss_scale_min)),
        ("overflows", f"[{style}]{overflows}[/]  [$text-muted]skipped[/] {skipped}"),
    ]


def _loss(loss: float | None) -> str:
    if loss is not None and not math.isfinite(loss):
        return f"[$text-error b]{loss}[/]"
    return f"[b]{format_loss(loss)}[/b]"


class NumericsPanel(Panel):
    """Loss, learning rate, gradient norm and the fp16 loss scale of the newest step."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Numerics", id=id)

    HAS_CHART = True

    def draw(self, view: RunView, now: float) -> str:
        return render_numerics(view, self.content_size.height or None)

    def draw_chart(self, view: RunView, now: float, width: int, height: int) -> str:
        return render_loss_charts(view, width, height, now)
