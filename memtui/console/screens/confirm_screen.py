"""Ask before anything destructive: ``y`` goes ahead, ``n`` or esc backs out."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from memtui.console.screens.modal import Modal


class ConfirmScreen(Modal[bool]):
    """A yes/no question; dismissed with True only on an explicit yes."""

    DEFAULT_CSS = """
    ConfirmScreen > Vertical {
        width: 60; padding: 1 2; border: round $error; border-title-color: $text-error;
    }
    ConfirmScreen Horizontal { height: auto; margin-top: 1; }
    ConfirmScreen Button { margin-right: 2; }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
    ]
    CLOSED = False

    def __init__(self, title: str, body: str, *, yes: str = "Yes") -> None:
        super().__init__()
        self._title, self._body, self._yes = title, body, yes

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self._title
            yield Static(self._body)
            with Horizontal():
                yield Button(f"{self._yes} (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
