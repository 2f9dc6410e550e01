"""Numerics: loss raw and smoothed, lr, grad norm, and the fp16 loss scale with its alerts."""

from __future__ import annotations

import math

from memtui.console.run_view import RunView
from memtui.console.widgets.panel import Panel
from memtui.formatting import format_float, format_scale

LABEL_WIDTH = 10
LOSS_FIXED_FROM, LOSS_FIXED_BELOW = 0.01, 10_000.0
"""Losses in this range show with three decimals."""


def render_numerics(view: RunView) -> str:
    """Aligned ``label value`` lines; an alert line in the error colour when one is raised."""
    s = view.sample
    rows = [
        ("loss", _loss(s.loss if s else None)),
        ("smoothed", format_loss(view.loss_smoothed)),
        ("lr", format_float(s.lr if s else None, 3)),
        ("grad norm", format_float(s.grad_norm if s else None, 3)),
        *_scale_rows(view),
    ]
    lines = [f"[$text-muted]{label:<{LABEL_WIDTH}}[/]{value}" for label, value in rows]
    lines += [f"[$text-error b]▲ {alert}[/]" for alert in view.numerics_alerts()]
    return "\n".join(lines)


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


def format_loss(loss: float | None) -> str:
    """Three decimals in the usual range (``3.000``, not ``3``: raw and smoothed line up and
    a change in the third decimal shows); significant digits outside it."""
    if loss is None or not math.isfinite(loss) or not LOSS_FIXED_FROM <= abs(loss) < LOSS_FIXED_BELOW:
        return format_float(loss)
    return f"{loss:.3f}"


class NumericsPanel(Panel):
    """Loss, learning rate, gradient norm and the fp16 loss scale of the newest step."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Numerics", id=id)

    def draw(self, view: RunView, now: float) -> str:
        return render_numerics(view)
