"""Alerts (a rule firing or clearing) and the doctor's reports."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from engine.events.payload import Payload
from engine.hardware_report import DoctorReport

STORAGE_RULE = "storage"
"""The alert rule of a store that cannot write (firing until a write gets through)."""
TASK_FAILED_RULE = "supervisor_task"
"""The alert rule of a supervisor task that ended with an unexpected exception."""
PLANNER_RULE = "planner"
"""The alert rule of an external planner that keeps failing to answer (firing while its
asks are backed off, resolved once it answers again)."""
HEARTBEAT_RULE = "heartbeat"
"""No step for ``alerts.no_step_s``: the supervisor collects every rank's stacks when it fires."""
METRICS_PORT_RULE = "metrics_port"
"""The alert rule of a ``metrics.port`` that cannot be served (in use, refused)."""
INSTANT_RULES = frozenset({"restart", TASK_FAILED_RULE, METRICS_PORT_RULE})
"""Rules that mark an instant, never a standing state: no "resolved" ever follows them."""
SUPERVISOR_RESTARTED = "supervisor_restarted"
"""``reason`` of the "resolved" alerts a new supervisor records for its predecessor's."""


class AlertRaised(Payload):
    """An alert rule fired or cleared; rule-specific figures ride along as extra keys."""

    event_type = "alert"
    rule: str
    """e.g. ``heartbeat``, ``memory_headroom``, ``gpu_temperature.0``."""
    state: Literal["firing", "resolved"]

    @property
    def resolved(self) -> bool:
        return self.state == "resolved"


class DoctorReported(Payload, DoctorReport):
    """A full doctor report: ``DoctorReport``'s fields, flat in ``data``."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")
    event_type = "doctor_report"

    def report(self) -> DoctorReport:
        return DoctorReport.model_validate(self.model_dump(include=set(DoctorReport.model_fields)))
