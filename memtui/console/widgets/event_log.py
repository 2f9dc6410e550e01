"""The timeline of durable events (replayed history, then live), newest at the bottom,
filterable by kind: adaptations, checkpoints, restarts, chaos, decisions, alerts. While the
panel has focus ↑/↓ move a cursor over the lines and enter opens the selected event in full
(``EventScreen``); without a cursor the newest lines show.

An event is listed once: a run of consecutive events saying the same thing (type and message)
is one line with a count, and a doctor report that repeats the one before it is not listed
again (the supervisor reports at start and again once its op survey answers, usually with the
same verdict; both are in the store and the newest is in the header). Routine events (saves,
cadence changes, a spare ready, start-up phases: the run working as it should) fold into one
live line in the unfiltered list, where the newest of them stands, with their counts; the
``checkpoints`` filter lists the saves one by one, ``restarts`` the spares and phases. A line
is the event's time and words (its type and number are in the full view): a narrow panel
keeps the words.

Most events show the line their writer recorded; chaos events are worded from their typed
payloads (``memtui.chaos.chaos_phrases``): what was injected, when it took effect, and whether
and how fast the run recovered (a failed recovery in the error colour)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

from textual.binding import Binding
from textual.markup import escape

from engine.domain import Event
from engine.events import (
    ChaosRecovered,
    CheckpointCadence,
    CheckpointSaved,
    DoctorReported,
    StandbyReady,
    StartupPhase,
)
from memtui.chaos.chaos_phrases import event_line
from memtui.console.alert_state import ALERT_EVENT
from memtui.console.run_view import RunView
from memtui.console.screens.event_screen import EventScreen
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
    "restarts": lambda e: e.type.startswith(
        ("trainer_", "restart", "run_", "state_changed", "rolled_back", "standby_", "startup_phase")
    ),
    "chaos": lambda e: e.type.startswith("chaos"),
    "adaptations": lambda e: e.type.startswith(("adapt", "memory", "micro_batch", "loss_scale")),
}
"""Filter name -> which events it keeps; the ``e`` key cycles through them in this order."""
DOCTOR_EVENT = DoctorReported.event_type
ROUTINE: dict[str, str] = {
    CheckpointSaved.event_type: "saved",
    CheckpointCadence.event_type: "cadence",
    StandbyReady.event_type: "spare ready",
    StartupPhase.event_type: "start-up",
}
"""Event type -> its word on the folded routine line (info events only fold)."""


def routine(event: Event) -> bool:
    return event.type in ROUTINE and event.severity == "info"


def render_event(event: Event, repeats: int = 1, selected: bool = False) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(event.ts))
    style = SEVERITY_STYLES.get(event.severity, "$text")
    recovery = ChaosRecovered.of(event)
    if recovery is not None and not recovery.recovered:
        style = SEVERITY_STYLES["critical"]
    text = escape(event_line(event) or event.message or event.type)
    count = f" [$text-muted]×{repeats}[/]" if repeats > 1 else ""
    line = f"[$text-muted]{clock}[/] [{style}]{text}[/]{count}"
    return f"[reverse]{line}[/reverse]" if selected else line


def render_routine(newest: Event, counts: Counter[str], selected: bool = False) -> str:
    """The folded line: how many routine events of each kind, then the newest one's words."""
    clock = time.strftime("%H:%M:%S", time.localtime(newest.ts))
    tally = " · ".join(f"{ROUTINE[kind]} ×{n}" for kind, n in counts.most_common())
    text = escape(newest.message or newest.type)
    line = f"[$text-muted]{clock} {tally}:[/] [$text-muted]{text}[/]"
    return f"[reverse]{line}[/reverse]" if selected else line


def listed(events: Sequence[Event], kind: str = "all") -> list[tuple[Event, int]]:
    """(event, how many it stands for) of the events that pass filter ``kind``, oldest first:
    consecutive events of one type and message fold into the newest of them, a doctor report
    saying what the previous one said is left out, and with ``all`` the routine events fold
    into their newest, listed where it stands."""
    keep = EVENT_FILTERS[kind]
    out: list[tuple[Event, int]] = []
    doctor: str | None = None
    folded: list[Event] = []
    for event in events:
        if not keep(event):
            continue
        if kind == "all" and routine(event):
            folded.append(event)
            continue
        if event.type == DOCTOR_EVENT:
            if event.message == doctor:
                continue
            doctor = event.message
        if out and (out[-1][0].type, out[-1][0].message) == (event.type, event.message):
            out[-1] = (event, out[-1][1] + 1)
        else:
            out.append((event, 1))
    if folded:  # where its newest member stands in time
        at = next((i for i, (e, _) in enumerate(out) if e.seq > folded[-1].seq), len(out))
        out.insert(at, (folded[-1], len(folded)))
    return out


def render_events(events: Sequence[Event], limit: int, kind: str = "all", selected: int | None = None) -> str:
    """Up to ``limit`` listed events that pass filter ``kind``, one line each (long lines crop):
    the newest, or those around the one with seq ``selected`` (marked)."""
    shown = listed(events, kind)
    if not shown:
        return "[$text-muted]no events yet[/]" if kind == "all" else f"[$text-muted]no {kind} events[/]"
    limit = max(1, limit)
    at = next((i for i, (e, _) in enumerate(shown) if e.seq == selected), None)
    end = len(shown) if at is None else min(len(shown), max(at + 1, limit))
    counts = Counter(e.type for e in events if kind == "all" and routine(e))

    def line(event: Event, repeats: int) -> str:
        if counts.total() > 1 and routine(event):
            return render_routine(event, counts, event.seq == selected)
        return render_event(event, repeats, event.seq == selected)

    return "\n".join(line(e, n) for e, n in shown[max(0, end - limit) : end])


class EventLog(Panel):
    """As many of the newest events as fit, through the chosen filter; a cursor to open one."""

    DEFAULT_CSS = """
    EventLog { text-wrap: nowrap; text-overflow: ellipsis; }
    """
    BINDINGS = [
        Binding("up", "move(-1)", "Previous", show=False),
        Binding("down", "move(1)", "Next", show=False),
        Binding("enter", "open", "Event in full", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Events", id=id)
        self.kind = "all"
        """Name of the filter in EVENT_FILTERS."""
        self.selected: int | None = None
        """Seq of the event under the cursor; None: no cursor, the newest lines show."""

    def action_move(self, delta: int) -> None:
        """Move the cursor ``delta`` lines (down past the newest drops it: the list follows again)."""
        shown = [e.seq for e, _ in listed(self._view.events if self._view else (), self.kind)]
        if not shown:
            return
        at = shown.index(self.selected) if self.selected in shown else len(shown)
        at += delta
        self.selected = None if at >= len(shown) else shown[max(0, at)]
        if self._view is not None:
            self.show(self._view, self._now, charts=False)

    def action_open(self) -> None:
        """The selected event (else the newest listed) in full."""
        shown = listed(self._view.events if self._view else (), self.kind)
        if not shown:
            return
        event = next((e for e, _ in shown if e.seq == self.selected), shown[-1][0])
        self.app.push_screen(EventScreen(event))

    def cycle_filter(self) -> str:
        names = list(EVENT_FILTERS)
        self.kind = names[(names.index(self.kind) + 1) % len(names)]
        if self._view is not None:
            self.show(self._view, self._now)
        return self.kind

    def draw(self, view: RunView, now: float) -> str:
        self.border_title = "Events" if self.kind == "all" else f"Events · {self.kind}"
        return render_events(view.events, self.content_size.height, self.kind, self.selected)
