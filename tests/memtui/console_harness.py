"""Reading a Pilot-driven console in tests: what a panel shows, and a barrier with the engine.

Waiting for something to be *drawn* is ``tests.waiting.until`` on the text (``text_of``).
For a check that something did *not* happen, first prove the moment has passed: ``caught_up``
(everything the engine sent has been handled) or ``drawn`` (the current view is on screen).
Toasts are read from ``recorded_notes``, never from ``app._notifications``: Textual adds a
toast there only when its Notify message is handled (after the view that caused it may be
drawn), and drops it once its timeout has passed (which a loaded machine can outrun).
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widget import Widget

from memtui.console.app import MemtuiApp
from memtui.console.widgets.panel import Panel
from tests.waiting import until


def text_of(widget: Widget) -> str:
    """What a panel shows, as plain text (markup resolved): its figures, then its chart."""
    if isinstance(widget, Panel):
        parts = [widget.body] + ([widget.chart] if widget.chart is not None else [])
        return "\n".join(str(part.visual) for part in parts)
    return str(widget.visual)


async def caught_up(app: MemtuiApp, pilot: Pilot[None]) -> None:
    """Everything the engine sent the console before now has been handled by the app.

    A Ping goes out on the console's own connection; the engine answers it after everything it
    sent before, the client relays messages to the app in arrival order, and ``pilot.pause()``
    returns once the app has handled what was posted to it. (Requests the console sends are
    checked with ``app.sent``, its record of them.)
    """
    assert app.client is not None, "the console is not connected"
    await app.client.ping()
    await pilot.pause()


async def drawn(app: MemtuiApp, pilot: Pilot[None]) -> None:
    """The console has drawn its view as it is now (for a check that something is *not* on
    screen): no redraw is pending, and the screen has been updated from the widgets."""
    await until(lambda: not app.main._dirty, what="the console to draw its current view")
    await pilot.pause()


def recorded_notes(app: MemtuiApp) -> list[tuple[str, str]]:
    """(title, text) of every toast ``app`` shows from now on, recorded as ``notify`` is called."""
    notes: list[tuple[str, str]] = []
    show = app.notify

    def notify(message: str, *, title: str = "", **kw: Any) -> None:
        notes.append((title, str(message)))
        show(message, title=title, **kw)

    app.notify = notify  # type: ignore[method-assign]
    return notes


def toasts(notes: list[tuple[str, str]]) -> list[str]:
    """``recorded_notes``' toasts as ``title: message``."""
    return [f"{title}: {text}" for title, text in notes]
