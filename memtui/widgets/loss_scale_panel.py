"""The fp16 dynamic loss scale: where it is, how low it went, how often it overflowed."""

from __future__ import annotations

from memtui.formatting import format_scale
from memtui.run_view import RunView
from memtui.widgets.panel import Panel

LABEL_WIDTH = 10


def render_loss_scale(view: RunView) -> str:
    s = view.sample
    if s is not None and s.loss_scale is None:
        return "[$text-muted]no loss scaling (bf16/fp32)[/]"
    overflows = s.overflow_count if s else 0
    overflow_style = "$text-warning" if overflows else "$text"
    flag = "  [$text-error]overflow: step skipped[/]" if s is not None and s.overflow else ""
    return (
        f"[$text-muted]{'scale':<{LABEL_WIDTH}}[/]{format_scale(s.loss_scale if s else None)}{flag}\n"
        f"[$text-muted]{'lowest':<{LABEL_WIDTH}}[/]{format_scale(view.loss_scale_min)}"
        f"  [$text-muted]overflows[/] [{overflow_style}]{overflows}[/]"
    )


class LossScalePanel(Panel):
    """fp16 loss scale: current, lowest seen, overflow count."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="fp16 loss scale", id=id)

    def draw(self, view: RunView, now: float) -> str:
        return render_loss_scale(view)
