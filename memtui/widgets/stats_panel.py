"""Training numbers: step, loss (raw and smoothed), lr, grad norm, throughput, step time."""

from __future__ import annotations

import math

from memtui.formatting import format_duration, format_float, format_rate
from memtui.run_view import RunView
from memtui.widgets.panel import Panel

LABEL_WIDTH = 11


def render_stats(view: RunView) -> str:
    """Aligned ``label value`` lines as content markup."""
    s = view.sample
    rows = [
        ("step", f"[b]{view.step}[/b]" + (f" / {view.target_steps}" if view.target_steps else "")),
        ("loss", _loss(s.loss if s else None)),
        ("smoothed", format_float(view.loss_smoothed)),
        ("lr", format_float(s.lr if s else None, 3)),
        ("grad norm", format_float(s.grad_norm if s else None, 3)),
        ("tokens/s", f"{format_rate(s.tokens_per_s if s else None)}"),
        ("  average", format_rate(view.tokens_per_s_avg)),
        ("step time", format_duration(s.step_time_s if s else None)),
    ]
    return "\n".join(f"[$text-muted]{label:<{LABEL_WIDTH}}[/]{value}" for label, value in rows)


def _loss(loss: float | None) -> str:
    if loss is not None and not math.isfinite(loss):
        return f"[$text-error b]{loss}[/]"
    return f"[b]{format_float(loss)}[/b]"


class StatsPanel(Panel):
    """The training numbers of the newest step."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Training", id=id)

    def draw(self, view: RunView, now: float) -> str:
        return render_stats(view)
