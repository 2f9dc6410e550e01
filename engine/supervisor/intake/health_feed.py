"""The run's health as the directive policy reads it, kept current by the events that say it.

The alert watch records through ``HealthFeed.record``: an ``alert`` or ``doctor_report`` it
records also re-judges the health (``engine.alerts.health``), and the directive queue's
``problems`` follow at once. Torch-free.
"""

from __future__ import annotations

from engine.alerts.health import HealthBoard
from engine.directives.queue import DirectiveQueue
from engine.domain import Event, Severity
from engine.events import Payload
from engine.supervisor.journal import Journal


class HealthFeed:
    """The newest doctor report and the alerts firing, told to the directive policy."""

    def __init__(
        self, journal: Journal, directives: DirectiveQueue, *, require_accelerator: bool | None
    ) -> None:
        self.journal = journal
        self.directives = directives
        self.require_accelerator = require_accelerator
        self.board = HealthBoard()
        self.judge()

    @property
    def active(self) -> dict[str, str]:
        """Firing alert rule -> its newest message."""
        return self.board.active

    def record(self, payload: Payload, message: str = "", *, severity: Severity | None = None) -> Event:
        """The journal's ``record``; an alert or a doctor report also re-judges the health."""
        event = self.journal.record(payload, message, severity=severity)
        if self.board.observe(event):
            self.judge()
        return event

    def judge(self) -> None:
        """The policy's ``problems`` and ``blockers`` from the newest doctor report and the
        alerts firing."""
        self.directives.problems = self.board.problems(self.require_accelerator)
        self.directives.blockers = self.board.blockers(self.require_accelerator)
