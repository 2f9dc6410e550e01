"""The top bar: which run, its state, progress, time, and how fresh the data is."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from memtui.alert_state import critical_banner
from memtui.formatting import format_age, format_duration, format_percent
from memtui.run_view import RunView

STATE_STYLES: dict[str, str] = {
    "running": "$text-success",
    "completed": "$text-success",
    "starting": "$text-primary",
    "paused": "b reverse $text-accent",  # a held run must not read like a running one
    "restarting": "$text-warning",
    "stopping": "$text-warning",
    "stopped": "$text-muted",
    "failed": "$text-error",
    "interrupted": "$text-error",
}
CONNECTION_LABELS: dict[str, tuple[str, str]] = {
    "connected": ("● live", "$text-success"),
    "connecting": ("◌ connecting", "$text-warning"),
    "disconnected": ("○ disconnected", "$text-error"),
    "history": ("◆ history (read-only)", "$text-muted"),
}
STALE_AFTER_S = 10.0
"""Data older than this while connected is flagged: the trainer may be stuck (not while
paused: a held trainer sends no steps)."""
PAUSED_EVENT = "run_paused"
"""The supervisor's record that the trainer holds at a step boundary (``Pause``)."""


def render_header(view: RunView, now: float, *, frozen: bool = False, readonly: bool = False) -> str:
    """Two lines of content markup."""
    return f"{_identity_line(view, now, frozen, readonly)}\n{_progress_line(view, now)}"


def _identity_line(view: RunView, now: float, frozen: bool, readonly: bool) -> str:
    state_style = STATE_STYLES.get(view.state, "$text")
    label, conn_style = CONNECTION_LABELS[view.connection]
    flags = ("  [reverse $text-warning] FROZEN [/]" if frozen else "") + (
        "  [$text-muted]read-only[/]" if readonly and view.connection != "history" else ""
    )
    if view.critical_alerts and not view.finished:  # until a "resolved" alert of each rule
        flags += f"  [reverse $text-error] {escape(critical_banner(view.critical_alerts))} [/]"
    state = f" {view.state} " if view.state == "paused" else view.state  # a badge, padded
    return (
        f"[b]{escape(view.run_id or 'no run')}[/b]  [{state_style}]{state}[/]{_restart_note(view)}"
        f"{_paused_note(view, now)}  [{conn_style}]{label}[/]{flags}"
    )


def _paused_note(view: RunView, now: float) -> str:
    """While paused: for how long, from the newest ``run_paused`` event (when still in view)."""
    if view.state != "paused":
        return ""
    since = next((e.ts for e in reversed(view.events) if e.type == PAUSED_EVENT), None)
    return "" if since is None else f" [$text-accent]for {format_duration(max(0.0, now - since))}[/]"


def _restart_note(view: RunView) -> str:
    """While restarting: why and from which step; afterwards: how many restarts so far."""
    event = view.last_restart
    if event is None:
        return ""
    if view.state == "restarting":
        cause = escape(str(event.data.get("cause", "trainer exited")))
        resume = event.data.get("resume_step")
        where = f"; resuming from step {resume}" if resume is not None else ""
        return f" [$text-warning]({cause}{where})[/]"
    count = view.restarts
    return f"  [$text-warning]↻ {count} restart{'s' if count != 1 else ''}[/]"


def _progress_line(view: RunView, now: float) -> str:
    target = f"/{view.target_steps}" if view.target_steps else ""
    age = view.data_age_s(now)
    stale = view.connection == "connected" and view.state != "paused" and (age or 0.0) > STALE_AFTER_S
    age_style = "$text-warning" if stale else "$text-muted"
    return (
        f"step [b]{view.step}[/b]{target} ({format_percent(view.progress)})"
        f"  elapsed {format_duration(view.elapsed_s(now))}"
        f"  ETA {format_duration(view.eta_s())}"
        f"  [{age_style}]data {format_age(age)}[/]"
    )


class RunHeader(Static):
    """Run id, state, connection, step/target, elapsed, ETA, age of the newest data."""

    DEFAULT_CSS = """
    RunHeader {
        height: 2;
        padding: 0 1;
        background: $panel;
    }
    """

    frozen = False
    """The display is paused (data still arrives)."""
    readonly = False
    _shown = ""

    def show(self, view: RunView, now: float) -> None:
        content = render_header(view, now, frozen=self.frozen, readonly=self.readonly)
        if content != self._shown:
            self._shown = content
            self.update(content, layout=False)
