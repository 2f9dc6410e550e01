"""Clamp a directive: edit its values within the policy's bounds, see old -> new, submit.

The console only checks that the numbers parse and shows where they fall against the
bounds; the policy re-checks whatever is submitted (zero trust) and may still refuse.
"""

from __future__ import annotations

import math

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Label, Static

from engine.domain import DIRECTIVE_FIELDS, INTEGER_FIELDS, DirectiveField
from engine.wire.protocol import DirectiveView
from memtui.console.directive_text import FIELD_LABELS, format_value
from memtui.console.screens.modal import FormModal
from memtui.directive_phrases import arrow

ClampValues = dict[DirectiveField, float | int]


def editable_fields(directive: DirectiveView) -> list[DirectiveField]:
    return [f for f in DIRECTIVE_FIELDS if f in directive.requested or f in directive.allowed]


def parse_clamp(texts: dict[DirectiveField, str]) -> tuple[ClampValues, list[str]]:
    """Field -> typed value, and one error per field that is not a finite number (or integer)."""
    values: ClampValues = {}
    errors = []
    for field, text in texts.items():
        try:
            value: float | int = int(text) if field in INTEGER_FIELDS else float(text)
        except ValueError:
            kind = "an integer" if field in INTEGER_FIELDS else "a number"
            errors.append(f"{FIELD_LABELS[field]}: not {kind}: {text!r}")
            continue
        if not math.isfinite(value):
            errors.append(f"{FIELD_LABELS[field]}: must be finite")
            continue
        values[field] = value
    return values, errors


def render_diff(directive: DirectiveView, values: ClampValues) -> str:
    """``lr × 1→0.3 (the policy allowed 0.5)`` per field: the value in effect → the one set
    here, and a warning where it is outside the bounds."""
    lines = []
    for field, new in values.items():
        allowed = directive.allowed.get(field, directive.requested.get(field))
        low, high = directive.bounds.get(field, (None, None))
        outside = (low is not None and new < low) or (high is not None and new > high)
        note = "  [$text-error]outside the bounds: the policy will refuse it[/]" if outside else ""
        style = "$text-success" if new != allowed else "$text-muted"
        change = arrow(field, directive.in_effect.get(field), f"[{style}]{format_value(new)}[/]")
        if new != allowed:
            change += f" (the policy allowed {format_value(allowed)})"
        lines.append(change + note)
    return "\n".join(lines)


class ClampScreen(FormModal[ClampValues | None]):
    """One input per field of the directive; enter submits, esc cancels."""

    DEFAULT_CSS = """
    ClampScreen > Vertical { width: 76; padding: 1 2; border: round $accent; }
    ClampScreen Horizontal { height: auto; }
    ClampScreen Label { width: 14; padding-top: 1; }
    ClampScreen Input { width: 16; }
    ClampScreen .bounds { width: 1fr; padding-top: 1; color: $text-muted; }
    ClampScreen #diff { margin-top: 1; }
    """

    def __init__(self, directive: DirectiveView) -> None:
        super().__init__()
        self.directive = directive

    def compose(self) -> ComposeResult:
        d = self.directive
        with Vertical() as box:
            box.border_title = f"Clamp {d.id}"
            for field in editable_fields(d):
                low, high = d.bounds.get(field, (None, None))
                value = d.allowed.get(field, d.requested.get(field))
                with Horizontal():
                    yield Label(FIELD_LABELS[field])
                    yield Input(format_value(value), id=f"field-{field}")
                    yield Static(f"bounds [{format_value(low)}, {format_value(high)}]", classes="bounds")
            yield Static(id="diff")
            yield Static("[$text-muted]enter submits (the policy re-checks) · esc cancels[/]")

    def on_mount(self) -> None:
        self._refresh_diff()

    def _texts(self) -> dict[DirectiveField, str]:
        return {f: self.query_one(f"#field-{f}", Input).value for f in editable_fields(self.directive)}

    def _refresh_diff(self) -> tuple[ClampValues, list[str]]:
        values, errors = parse_clamp(self._texts())
        diff = render_diff(self.directive, values)
        self.query_one("#diff", Static).update("\n".join([diff, *(f"[$text-error]{e}[/]" for e in errors)]))
        return values, errors

    def on_input_changed(self) -> None:
        self._refresh_diff()

    def submit(self) -> None:
        """Dismiss with the values if every field parses (the policy checks the bounds)."""
        values, errors = self._refresh_diff()
        if not errors and values:
            self.dismiss(values)
