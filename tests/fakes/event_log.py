"""The journal's stand-in for tests of the parts that raise events: numbers and keeps them.

``EventLog()`` is an ``engine.events.Recorder``: the directive queue, the planners and the
alert watch record into it exactly as into the supervisor's journal. ``fail_first=N`` makes
the first N records raise as a full disk would.
"""

from __future__ import annotations

import time
from typing import Any

from engine.domain import Event, Severity
from engine.events import Payload


class EventLog:
    def __init__(self, fail_first: int = 0) -> None:
        self.events: list[Event] = []
        self.fail_first = fail_first

    def __call__(self, payload: Payload, message: str = "", *, severity: Severity | None = None) -> Event:
        if self.fail_first > 0:
            self.fail_first -= 1
            raise OSError(28, "No space left on device")
        event = Event(
            seq=len(self.events) + 1,
            ts=time.time(),
            type=payload.event_type,
            severity=severity or payload.severity,
            message=message,
            data=payload.data(),
        )
        self.events.append(event)
        return event

    def data_of(self, type_: str) -> list[dict[str, Any]]:
        """The ``data`` of every recorded event of ``type_``, oldest first."""
        return [e.data for e in self.events if e.type == type_]
