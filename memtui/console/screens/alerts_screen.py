"""The alert list: every alert episode of the run, firing ones on top, newest first below.

Drawn from the app's newest view (``RunView.alerts``), checked once a second while open: new
alerts appear and a firing alert's duration moves on. ``f`` shows only the firing ones.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Static

from memtui.console.alert_timeline import AlertEpisode, alert_episodes
from memtui.console.run_view import RunView
from memtui.console.screens.modal import Modal
from memtui.formatting import format_duration

POLL_S = 1.0
"""How often the list is redrawn from the app's view (durations of firing alerts move on)."""
SEVERITY_STYLES: dict[str, str] = {"info": "$text", "warning": "$text-warning", "critical": "$text-error"}
SHORT_SEVERITY: dict[str, str] = {"info": "info", "warning": "warn", "critical": "crit"}
MESSAGE_MIN = 30
"""Cells the message keeps; narrower lists shorten the severity and state columns first."""
GAP = "  "
WRAP_MIN = 12
"""Cells a message wraps to at the least (a narrower column would be a word a line)."""


def render_alert_list(
    episodes: Sequence[AlertEpisode], now: float, *, firing_only: bool = False, width: int = 200
) -> str:
    """A header and one line per episode: time, severity, rule, state and how long, message;
    columns as wide as their contents, short forms where ``width`` leaves the message too little."""
    shown = [e for e in episodes if e.firing] if firing_only else list(episodes)
    if not shown:
        return "[$text-muted]no firing alerts[/]" if firing_only else "[$text-muted]no alerts yet[/]"
    rule_w = max(4, *(len(e.rule) for e in shown))
    for short in (False, True):
        states = [_state(e, now, short) for e in shown]
        sev_w, state_w = (4 if short else 8), max(5, *(len(x) for x in states))
        if 8 + sev_w + rule_w + state_w + 4 * len(GAP) + MESSAGE_MIN <= width:
            break
    header = GAP.join(["TIME    ", f"{'SEV' if short else 'SEVERITY':<{sev_w}}", f"{'RULE':<{rule_w}}"])
    header += GAP + f"{'STATE':<{state_w}}" + GAP + "MESSAGE"
    widths = (sev_w, rule_w, state_w)
    room = width - (8 + sev_w + rule_w + state_w + 4 * len(GAP))  # the message's cells
    lines = [
        row
        for e, state in zip(shown, states, strict=True)
        for row in (_line(e, state, widths, short, room), *_places(e))
    ]
    return "\n".join([f"[$text-muted]{header}[/]", *lines])


def _places(e: AlertEpisode) -> list[str]:
    """Under a heartbeat alert: where each rank was when its stacks were collected."""
    return [f"{' ' * 8}{GAP}[$text-muted]↳[/] {escape(place)}" for place in e.where]


def _state(e: AlertEpisode, now: float, short: bool) -> str:
    """``firing for 5m12s`` / ``resolved after 3m00s`` (``firing 5m12s`` / ``resolved 3m00s``)."""
    took = e.duration_s(now)
    if e.firing:
        return f"firing {'' if short else 'for '}{format_duration(took)}"
    return "resolved" + ("" if took is None else f" {'' if short else 'after '}{format_duration(took)}")


def _line(e: AlertEpisode, state: str, widths: tuple[int, int, int], short: bool, room: int) -> str:
    sev_w, rule_w, state_w = widths
    clock = time.strftime("%H:%M:%S", time.localtime(e.started_at or e.last_at))
    style = SEVERITY_STYLES.get(e.severity, "$text")
    severity = SHORT_SEVERITY.get(e.severity, e.severity) if short else e.severity
    repeats = f" ×{e.reminders + 1}" if e.reminders else ""
    # Wrapped at words into the message column (the box would cut it mid-word).
    indent = "\n" + " " * (8 + sev_w + rule_w + state_w + 4 * len(GAP))
    text = indent.join(escape(part) for part in textwrap.wrap(e.message + repeats, max(WRAP_MIN, room)))
    rule = escape(f"{e.rule:<{rule_w}}")
    if e.firing:  # bold, coloured by severity: what needs a look now
        cells = f"{clock}{GAP}[{style}]{severity:<{sev_w}}[/]{GAP}{rule}{GAP}[{style}]{state:<{state_w}}[/]"
        return f"[b]{cells}{GAP}{text}[/b]"
    return (
        f"[$text-muted]{clock}[/]{GAP}[{style}]{severity:<{sev_w}}[/]{GAP}{rule}"
        f"{GAP}[$text-success]{state:<{state_w}}[/]{GAP}{text}"
    )


def alerts_title(episodes: Sequence[AlertEpisode], firing_only: bool) -> str:
    firing = sum(e.firing for e in episodes)
    scope = " · firing only" if firing_only else ""
    return f"Alerts · {firing} firing · {len(episodes)} in all{scope}"


class AlertsScreen(Modal[None]):
    """Every alert of the run; f shows the firing ones only; esc closes."""

    DEFAULT_CSS = """
    AlertsScreen > Vertical { width: 95%; max-width: 140; max-height: 90%; padding: 1 2; }
    AlertsScreen #alert-list { width: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    """
    BINDINGS = [
        Binding("A", "close", "Close"),
        Binding("q", "close", "Close"),
        Binding("f", "toggle_firing", "Firing only"),
    ]

    def __init__(self, view: Callable[[], RunView], clock: Callable[[], float]) -> None:
        """``view`` returns the app's newest view; ``clock`` is Unix time (for the durations)."""
        super().__init__()
        self._view = view
        self._clock = clock
        self.firing_only = False
        """Only firing alerts are listed."""
        self.text = ""
        """The list's markup as last drawn."""
        self._box = Vertical()

    def compose(self) -> ComposeResult:
        self._box.border_subtitle = "f firing only / all · esc closes"  # on the border: never scrolled away
        with self._box, VerticalScroll():
            yield Static(id="alert-list")

    def on_mount(self) -> None:
        self.refresh_list()
        self.set_interval(POLL_S, self.refresh_list)

    def refresh_list(self) -> None:
        episodes = alert_episodes(self._view().alerts)
        self._box.border_title = alerts_title(episodes, self.firing_only)
        width = self.app.size.width - 10  # the box's border and padding, and the screen's margin
        text = render_alert_list(episodes, self._clock(), firing_only=self.firing_only, width=width)
        if text != self.text:
            self.text = text
            self.query_one("#alert-list", Static).update(text)

    def action_toggle_firing(self) -> None:
        self.firing_only = not self.firing_only
        self.refresh_list()
