"""One line under the memory panel's figures: where the plan says a rank's memory goes
(parameters, gradients, optimizer states, activations at the current micro-batch, other)
beside the measured step peak and the plan's own peak for the run's configuration.

"other" is what the measured peak holds beyond the modelled tensors: the CUDA context and
the allocator's slack (on the CPU the process's whole runtime); chaos ballast held in the
step is named apart ("ballast"), never counted as "other". The plan comes with the
trainer's ``trainer_started`` (``engine.events.PlannedMemory``); a run without one (a
user's workload, an older trainer) shows no line. Pure renderer, beside the panel.
"""

from __future__ import annotations

from memtui.console.run_view import RunView
from memtui.formatting import format_bytes

LABEL_WIDTH = 10


def render_breakdown(view: RunView, width: int) -> str | None:
    """The breakdown line ``width`` cells wide, or None when there is no plan to show."""
    s, started = view.sample, view.started
    plan = started.planned_memory if started else None
    if s is None or plan is None:
        return None
    activations = plan.activations_per_sample * s.micro_batch
    modelled = plan.params + plan.grads + plan.optimizer + plan.gathered + activations
    parts = [
        ("params", plan.params),
        ("grads", plan.grads),
        ("optim", plan.optimizer + plan.gathered),
        ("act", activations),
    ]
    ballast = s.mem_ballast or 0
    if ballast:
        parts.append(("ballast", ballast))
    if s.mem_step_peak:
        parts.append(("other", max(0, s.mem_step_peak - modelled - ballast)))
    figures = " ".join(f"[$text-muted]{name}[/] {format_bytes(value)}" for name, value in parts)
    line = f"[$text-muted]{'model':<{LABEL_WIDTH}}[/]{figures}"
    plan_note = f"  [$text-muted]plan[/] {format_bytes(plan.planned_peak)} at {plan.micro_batch}"
    return line + plan_note if _visible(line + plan_note) <= width else line


def _visible(markup: str) -> int:
    from textual.content import Content

    return len(Content.from_markup(markup).plain)
