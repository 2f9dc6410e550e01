"""One event in full: when, what, its whole message and every field of its data.

The event list crops each line to its panel's width; this modal (enter on the selected event)
wraps the message and prints the data as indented JSON, scrolled inside a box no taller than
the screen.
"""

from __future__ import annotations

import json
import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Static

from engine.domain import Event
from memtui.chaos.chaos_phrases import event_line
from memtui.console.screens.modal import Modal

CLOSE_HINT = "esc or enter closes · ↑/↓ scroll"


def render_event_details(event: Event) -> str:
    """Content markup: time (UTC offset shown), severity, attempt, the message (and the
    console's wording of it where it has one), then the data."""
    clock = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(event.ts))
    attempt = f"   [$text-muted]attempt[/] {event.attempt}" if event.attempt is not None else ""
    lines = [
        f"[$text-muted]at[/] {clock}   [$text-muted]severity[/] {event.severity}{attempt}",
        "",
        escape(event.message) if event.message else "[$text-muted](no message)[/]",
    ]
    worded = event_line(event)
    if worded and worded != event.message:
        lines += ["", f"[$text-muted]as the list says:[/] {escape(worded)}"]
    lines += ["", "[$text-muted]data[/]"]
    data = json.dumps(event.data, indent=2, sort_keys=True, default=str)  # whole, every field
    lines.append(escape(data))
    return "\n".join(lines)


class EventScreen(Modal[None]):
    """Everything one event says; esc or enter closes."""

    DEFAULT_CSS = """
    EventScreen > Vertical { width: 100; max-width: 100%; padding: 0 1; }
    """
    BINDINGS = [Binding("enter", "close", "Close")]

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.shown = event
        """The event shown."""

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"Event #{self.shown.seq} · {escape(self.shown.type)}"
            box.border_subtitle = CLOSE_HINT  # on the border: never scrolled away
            with VerticalScroll():
                yield Static(render_event_details(self.shown), id="event-details")
