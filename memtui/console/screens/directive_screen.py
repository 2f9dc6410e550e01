"""Everything about one directive: source, timing, each field in effect/asked/allowed/bounds, reasons,
the planner's evidence and, once applied, its measured effect."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Static

from engine.domain import DIRECTIVE_FIELDS
from engine.wire.protocol import DirectiveView
from memtui.console.directive_text import FIELD_LABELS, format_value, render_timing
from memtui.console.screens.modal import Modal

ANSWERS = ("approve", "clamp", "reject")
"""The detail's answers, each on its first letter (the main screen's keys for them too)."""
AGE_TICK_S = 1.0
"""How often (seconds) the detail's age and time to expiry move on."""


def render_details(d: DirectiveView, now: float) -> str:
    lines = [
        f"[$text-muted]source[/]  {escape(d.source)}   [$text-muted]state[/] {d.state}",
        f"[$text-muted]based on[/] step {d.step}   {render_timing(d, now)}",
        "",
        f"[$text-muted]{'field':<13}{'in effect':>10}{'asked':>10}{'allowed':>10}  bounds[/]",
    ]
    for field in DIRECTIVE_FIELDS:
        if field in d.requested or field in d.allowed:
            low, high = d.bounds.get(field, (None, None))
            lines.append(
                f"{FIELD_LABELS[field]:<13}{format_value(d.in_effect.get(field)):>10}"
                f"{format_value(d.requested.get(field)):>10}"
                f"{format_value(d.allowed.get(field)):>10}  [{format_value(low)}, {format_value(high)}]"
            )
    lines += ["", "[$text-muted]reasons[/]", *(f"· {escape(r)}" for r in d.reasons or ["(none given)"])]
    if d.evidence:
        lines += [
            "",
            "[$text-muted]evidence (telemetry the planner read)[/]",
            *(f"· {escape(e)}" for e in d.evidence),
        ]
    if d.effect is not None:
        lines += ["", "[$text-muted]effect[/]", escape(d.effect.describe())]
    return "\n".join(lines)


class DirectiveScreen(Modal[str | None]):
    """Details of one directive, its age ticking; esc or enter closes. Where the console may
    answer, a, c and r close it with ``"approve"``, ``"clamp"`` or ``"reject"`` (the console
    then asks as its own keys do); read-only, they say why not."""

    BINDINGS = [
        Binding("enter", "close", "Close"),
        *(Binding(answer[0], f"answer('{answer}')", answer.capitalize()) for answer in ANSWERS),
    ]

    def __init__(
        self, directive: DirectiveView, clock: Callable[[], float], *, refusal: str | None = None
    ) -> None:
        """``refusal``: why this console answers no directive (read-only), None if it does."""
        super().__init__()
        self.directive, self.clock, self.refusal = directive, clock, refusal

    def compose(self) -> ComposeResult:
        with Vertical() as box, VerticalScroll():
            box.border_title = f"Directive {self.directive.id}"
            # on the border: never scrolled away
            keys = " · ".join(f"{a[0]} {a}" for a in ANSWERS) if self.refusal is None else "read-only"
            box.border_subtitle = f"esc closes · {keys}"
            yield Static(render_details(self.directive, self.clock()), id="details")

    def on_mount(self) -> None:
        self.set_interval(AGE_TICK_S, self._age)

    def _age(self) -> None:
        self.query_one("#details", Static).update(render_details(self.directive, self.clock()))

    def action_answer(self, answer: str) -> None:
        if self.refusal is None:
            self.dismiss(answer)
        else:
            self.notify(self.refusal, severity="warning")
