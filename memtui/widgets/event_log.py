"""The newest durable events (replayed history, then live), newest at the bottom."""

from __future__ import annotations

import time
from collections.abc import Sequence

from textual.markup import escape

from engine.domain import Event
from memtui.run_view import RunView
from memtui.widgets.panel import Panel

SEVERITY_STYLES: dict[str, str] = {
    "info": "$text",
    "warning": "$text-warning",
    "critical": "$text-error",
}


def render_event(event: Event) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(event.ts))
    style = SEVERITY_STYLES.get(event.severity, "$text")
    text = escape(event.message or event.type)
    return f"[$text-muted]{clock} #{event.seq:<4}[/] [$text-secondary]{event.type}[/] [{style}]{text}[/]"


def render_events(events: Sequence[Event], limit: int) -> str:
    """The newest ``limit`` events, one line each (the widget crops long lines)."""
    if not events:
        return "[$text-muted]no events yet[/]"
    return "\n".join(render_event(e) for e in events[-max(1, limit) :])


class EventLog(Panel):
    """As many of the newest events as fit."""

    DEFAULT_CSS = """
    EventLog { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Events", id=id)

    def draw(self, view: RunView, now: float) -> str:
        return render_events(view.events, self.content_size.height)
