"""Alerts as the console sees them: which critical and warning ones are active (the header
shows both until resolved: a toast alone is gone before an operator looks), and how each
is announced.

The supervisor records every alert as an ``alert`` event (``engine.alerts.rules``):
``data.rule`` names the condition (``heartbeat``, ``disk_low``, ``gpu_temperature.0``...)
and ``data.state`` is ``firing`` or ``resolved``; the "back to normal" alert has severity
``info``. A critical or warning alert stays active until a resolved alert of the same rule
arrives; an instant (a restart: ``INSTANT_RULES``) is never resolved, so never stands.
Pure functions of events: the view folds them, the app announces them.
"""

from __future__ import annotations

from typing import Literal

from engine.domain import Event
from engine.events import INSTANT_RULES, AlertRaised, StacksCollected

ALERT_EVENT = AlertRaised.event_type
KEPT_WITH_ALERTS = frozenset({ALERT_EVENT, StacksCollected.event_type})
"""Events the alert list reads: the alerts, and the stacks a heartbeat alert collected."""
ToastSeverity = Literal["information", "warning", "error"]
TOAST_SEVERITY: dict[str, ToastSeverity] = {"info": "information", "warning": "warning", "critical": "error"}
"""Event severity -> ``App.notify`` severity."""
TOAST_TIMEOUT_S: dict[str, float] = {"info": 5.0, "warning": 10.0, "critical": 30.0}
"""Seconds a toast stays: a critical one long enough to be seen on return to the screen."""


def alert_rule(event: Event) -> str:
    alert = AlertRaised.of(event)
    return alert.rule if alert is not None else event.type


def is_resolved(event: Event) -> bool:
    alert = AlertRaised.of(event)
    return alert is not None and alert.resolved


def critical_after(event: Event, active: tuple[Event, ...]) -> tuple[Event, ...]:
    """The active critical alerts (one per rule, newest wins) after ``event``."""
    return _active_after(event, active, "critical")


def warning_after(event: Event, active: tuple[Event, ...]) -> tuple[Event, ...]:
    """The active warning alerts (one per rule, newest wins) after ``event``; instants never."""
    if alert_rule(event) in INSTANT_RULES:
        return active
    return _active_after(event, active, "warning")


def _active_after(event: Event, active: tuple[Event, ...], severity: str) -> tuple[Event, ...]:
    if event.type != ALERT_EVENT:
        return active
    rule = alert_rule(event)
    others = tuple(e for e in active if alert_rule(e) != rule)
    if is_resolved(event):
        return others
    return (*others, event) if event.severity == severity else active


def toast(event: Event) -> tuple[str, str, ToastSeverity, float]:
    """(title, message, severity, timeout) of the toast announcing an alert event."""
    state = "resolved" if is_resolved(event) else event.severity
    return (
        f"alert · {alert_rule(event)} · {state}",
        event.message or alert_rule(event),
        TOAST_SEVERITY.get(event.severity, "information"),
        TOAST_TIMEOUT_S.get(event.severity, 10.0),
    )


def rings_bell(event: Event) -> bool:
    """A firing warning or critical alert rings the (opt-in) terminal bell; "resolved" does not."""
    return event.type == ALERT_EVENT and not is_resolved(event) and event.severity != "info"


def critical_banner(active: tuple[Event, ...]) -> str:
    """``CRITICAL: heartbeat`` / ``CRITICAL ×2: heartbeat, disk_low``; empty when none."""
    if not active:
        return ""
    rules = ", ".join(alert_rule(e) for e in active)
    count = f" ×{len(active)}" if len(active) > 1 else ""
    return f"⚠ CRITICAL{count}: {rules}"


def warning_banner(active: tuple[Event, ...]) -> str:
    """``warning: throughput_drop`` / ``warnings ×2: throughput_drop, memory_headroom``."""
    if not active:
        return ""
    rules = ", ".join(alert_rule(e) for e in active)
    return f"warning: {rules}" if len(active) == 1 else f"warnings ×{len(active)}: {rules}"
