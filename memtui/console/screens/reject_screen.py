"""Reject a directive: the operator says why (stored with the decision)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from engine.protocol import DirectiveView
from memtui.console.directive_text import render_changes

DEFAULT_REASON = "rejected by the operator"


class RejectScreen(ModalScreen[str | None]):
    """Enter submits the reason (a default when left empty); esc cancels."""

    DEFAULT_CSS = """
    RejectScreen { align: center middle; }
    RejectScreen > Vertical {
        width: 70; max-width: 95%; height: auto; padding: 1 2;
        border: round $warning; background: $surface;
    }
    RejectScreen Input { margin-top: 1; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

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

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or DEFAULT_REASON)

    def action_cancel(self) -> None:
        self.dismiss(None)
