"""Reject a directive: the operator says why (stored with the decision)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.markup import escape
from textual.widgets import Input, Static

from engine.wire.protocol import DirectiveView
from memtui.console.directive_text import render_changes
from memtui.console.screens.modal import FormModal

DEFAULT_REASON = "rejected by the operator"


class RejectScreen(FormModal[str | None]):
    """Enter submits the reason (a default when left empty); esc cancels."""

    DEFAULT_CSS = """
    RejectScreen > Vertical { width: 70; padding: 1 2; border: round $warning; }
    RejectScreen Input { margin-top: 1; }
    """

    def __init__(self, directive: DirectiveView) -> None:
        super().__init__()
        self.directive = directive

    def compose(self) -> ComposeResult:
        d = self.directive
        with Vertical() as box:
            box.border_title = f"Reject {d.id}"
            yield Static(f"[b]{escape(d.source)}[/b]  {render_changes(d)}")
            yield Input(placeholder=DEFAULT_REASON, id="reason")
            yield Static("[$text-muted]enter rejects · esc cancels[/]")

    def submit(self) -> None:
        self.dismiss(self.query_one("#reason", Input).value.strip() or DEFAULT_REASON)
