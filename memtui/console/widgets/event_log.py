"""The timeline of durable events (replayed history, then live), newest at the bottom,
filterable by kind: adaptations, checkpoints, restarts, chaos, decisions, alerts.

Most events show the line their writer recorded; chaos events are worded from their typed
payloads (``memtui.chaos_phrases``): what was injected, when it took effect, and whether
and how fast the run recovered (a failed recovery in the error colour)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from textual.markup import escape

from engine.domain import Event
from engine.events import ChaosRecovered
from memtui.chaos_phrases import event_line
from memtui.console.alert_state import ALERT_EVENT
from memtui.console.run_view import RunView
from memtui.console.widgets.panel import Panel

SEVERITY_STYLES: dict[str, str] = {
    "info": "$text",
    "warning": "$text-warning",
    "critical": "$text-error",
}
EVENT_FILTERS: dict[str, Callable[[Event], bool]] = {
    "all": lambda e: True,
    "alerts": lambda e: e.severity != "info" or e.type == ALERT_EVENT,  # "resolved" alerts are info
    "decisions": lambda e: e.type.startswith("directive"),
    "checkpoints": lambda e: e.type.startswith("checkpoint"),
    "restarts": lambda e: e.type.startswith(("trainer_", "restart", "run_", "state_changed")),
    "chaos": lambda e: e.type.startswith("chaos"),
    "adaptations": lambda e: e.type.startswith(("adapt", "memory", "micro_batch", "loss_scale")),
}
"""Filter name -> which events it keeps; the ``e`` key cycles through them in this order."""


def render_event(event: Event) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(event.ts))
    style = SEVERITY_STYLES.get(event.severity, "$text")
    recovery = ChaosRecovered.of(event)
    if recovery is not None and not recovery.recovered:
        style = SEVERITY_STYLES["critical"]
    text = escape(event_line(event) or event.message or event.type)
    return f"[$text-muted]{clock} #{event.seq:<4}[/] [$text-secondary]{event.type}[/] [{style}]{text}[/]"


def render_events(events: Sequence[Event], limit: int, kind: str = "all") -> str:
    """The newest ``limit`` events that pass filter ``kind``, one line each (long lines crop)."""
    keep = EVENT_FILTERS[kind]
    shown = [e for e in events if keep(e)]
    if not shown:
        return "[$text-muted]no events yet[/]" if kind == "all" else f"[$text-muted]no {kind} events[/]"
    return "\n".join(render_event(e) for e in shown[-max(1, limit) :])


class EventLog(Panel):
    """As many of the newest events as fit, through the chosen filter."""

    DEFAULT_CSS = """
    EventLog { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Events", id=id)
        self.kind = "all"
        """Name of the filter in EVENT_FILTERS."""

    def cycle_filter(self) -> str:
        names = list(EVENT_FILTERS)
        self.kind = names[(names.index(self.kind) + 1) % len(names)]
        if self._view is not None:
            self.show(self._view, self._now)
        return self.kind

    def draw(self, view: RunView, now: float) -> str:
        self.border_title = "Events" if self.kind == "all" else f"Events · {self.kind}"
        return render_events(view.events, self.content_size.height, self.kind)
