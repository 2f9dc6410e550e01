"""Warnings about a workload's own scalars (``engine.measures.user_metrics``): a value dropped by the
screen, or ranks that disagreed on the names. Said once per name and reason; training goes on."""

from __future__ import annotations

from engine.events.payload import Payload


class MetricWarning(Payload):
    event_type = "metric_warning"
    origin = "trainer"
    severity = "warning"
    step: int
    """The step (1-based, as telemetry numbers it) whose report found the problem."""
