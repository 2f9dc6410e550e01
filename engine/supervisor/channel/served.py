"""``Served``: what the socket's consoles ask of the run they serve (the ``Supervisor``
implements it); ``ReportOwner``: who takes what the trainer reports (``TrainerReports``);
and the directive requests a console may send. Torch-free."""

from __future__ import annotations

from typing import Any, Protocol

from engine.domain import RunState, RunStatus, TelemetrySample
from engine.events import Payload
from engine.hardware_report import HardwareSnapshot
from engine.supervisor.channel.trainer_link import TrainerLink
from engine.wire.protocol import Approve, Chaos, Clamp, Error, Ok, Propose, Reject, TrainerEvent

DirectiveRequest = Approve | Clamp | Reject | Propose


class Served(Protocol):
    """What the consoles' conversations ask of the run they serve."""

    @property
    def state(self) -> RunState: ...

    @property
    def latest(self) -> TelemetrySample | None: ...

    def hardware(self) -> HardwareSnapshot | None: ...

    def status(self) -> RunStatus: ...

    def request_stop(self, reason: str = "operator") -> RunState: ...

    def request_pause(self, paused: bool, reason: str, request_id: Any = None) -> Ok | Error: ...

    def chaos(self, message: Chaos) -> Ok | Error: ...

    def directive_request(self, message: DirectiveRequest) -> Ok | Error: ...


class ReportOwner(Protocol):
    """Who owns what the trainer reports: the connection hands each report straight to it."""

    def greet(self, link: TrainerLink) -> None:
        """A trainer just connected (and was welcomed): tell it what it missed."""

    def on_step(self, sample: TelemetrySample) -> None: ...

    def on_event(self, message: TrainerEvent, payload: Payload | None) -> None: ...
