"""Who carries out a chaos kind in the supervisor: one ``SupervisorPerformer`` per kind the
supervisor does itself (a module of ``engine.supervisor.chaos.performers``), and one that
hands every trainer kind to the trainer as ``InjectChaos``.

A performer first aims (``aim``: what it will act on, or why it cannot now; nothing has
changed yet), then, once ``chaos_injected`` is stored, acts (``act``); a kind whose verdict
the supervisor decides itself resolves it through the desk. ``taken_up`` reads back what a
stored injection acted on, for a new supervisor. Torch-free.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from engine.chaos.kind import ChaosKind, Pending
from engine.chaos.table import KINDS, import_all
from engine.directives.queue import DirectiveQueue
from engine.events import ChaosInjected
from engine.run.directory import RunDir
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.channel.trainer_link import TrainerLink
from engine.supervisor.trainers.attempts import Attempts
from engine.wire.protocol import InjectChaos


@dataclass(frozen=True)
class Aim:
    """What an injection acts on besides the run (stored in ``chaos_injected``)."""

    pid: int | None = None
    target: str | None = None
    """A file, relative to ``checkpoints/``."""
    target_tag: str | None = None
    target_step: int | None = None
    done_to_it: str | None = None
    """What is done to the target, in words, for the event's message (e.g. bytes flipped)."""


class Desk(Protocol):
    """What a performer may use of the chaos desk."""

    run: RunDir
    attempts: Attempts
    directives: DirectiveQueue
    consoles: Consoles
    spawn: Callable[..., Any]

    def trainer(self) -> TrainerLink | None: ...
    def resolve(self, chaos_id: str, recovered: bool, detail: str) -> None: ...


class SupervisorPerformer(ABC):
    """Carries out one kind (``model``, its request model); subclasses register by naming it."""

    model: ClassVar[type[ChaosKind]]
    registry: ClassVar[dict[str, SupervisorPerformer]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model" in cls.__dict__:
            SupervisorPerformer.registry[cls.model.name()] = cls()

    @property
    def kind(self) -> str:
        """The kind's name, as its model declares it."""
        return self.model.name()

    def aim(self, desk: Desk, state: str) -> Aim | str:
        """What it will act on, or why it cannot be done now (the run is ``state``)."""
        return Aim()

    @abstractmethod
    def act(self, desk: Desk, request: ChaosKind, chaos_id: str, aim: Aim) -> None:
        """Carry out ``request`` on what ``aim`` names (the desk resolves it when it is done)."""

    def taken_up(self, pending: Pending, injected: ChaosInjected) -> None:
        """A new supervisor's tracking of a stored injection: what it acted on, read back
        (most kinds keep nothing to read back)."""
        return None


class HandToTheTrainer(SupervisorPerformer):
    """Every trainer kind: sent to the trainer, which says ``chaos_applied`` when it takes effect."""

    def aim(self, desk: Desk, state: str) -> Aim | str:
        return Aim() if desk.trainer() is not None else f"no trainer is running (the run is {state})"

    def act(self, desk: Desk, request: ChaosKind, chaos_id: str, aim: Aim) -> None:
        link = desk.trainer()
        if link is not None:
            link.send(InjectChaos(chaos_id=chaos_id, request=request))


TO_THE_TRAINER = HandToTheTrainer()


@functools.cache
def performers() -> dict[str, SupervisorPerformer]:
    """Kind -> its performer here, in menu order: the kinds this supervisor advertises."""
    import_all("engine.supervisor.chaos.performers")
    own = SupervisorPerformer.registry
    return {
        kind: own.get(kind, TO_THE_TRAINER)
        for kind, model in KINDS.items()
        if kind in own or model.performer == "trainer"
    }
