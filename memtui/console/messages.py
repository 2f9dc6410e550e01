"""What the engine connection tells the app, as Textual messages (small dataclasses).

Telemetry arrives up to ~10 Hz and only the newest matters, so ``TelemetryReceived``
coalesces: a queued one is replaced by the next (``can_replace``), unless only the queued one
carries the ranks' memory report. Events never coalesce.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from engine.domain import Event, ThroughputFigures
from engine.hardware_report import HardwareSnapshot
from engine.protocol import Telemetry, Welcome
from memtui.client import ConnectionState
from memtui.console.series import ChartWindow, Point


@dataclass
class TelemetryReceived(Message):
    telemetry: Telemetry

    def can_replace(self, message: Message) -> bool:
        """A queued sample is replaced by this newer one, unless only the queued one carries
        a rank report (those come every few steps and must not be lost)."""
        if not isinstance(message, TelemetryReceived):
            return False
        return message.telemetry.sample.ranks is None or self.telemetry.sample.ranks is not None


@dataclass
class HardwareReceived(Message):
    """The newest hardware reading (~0.1 Hz); a queued one is replaced by the next."""

    snapshot: HardwareSnapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, HardwareReceived)


@dataclass
class EventReceived(Message):
    event: Event


@dataclass
class WelcomeReceived(Message):
    welcome: Welcome


@dataclass
class ConnectionChanged(Message):
    state: ConnectionState


@dataclass
class WindowRead(Message):
    """A longer chart window, read from the store by a worker thread."""

    window: ChartWindow
    points: tuple[Point, ...]


@dataclass
class RunFiguresRead(Message):
    """The run-wide tokens/s, read from the store by a worker thread (None: unreadable)."""

    figures: ThroughputFigures | None
