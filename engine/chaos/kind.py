"""What one chaos kind is: its request model (parameters with bounds and help), its words,
and the signal that says the run recovered from it.

A kind is one subclass of ``ChaosKind`` in a module of ``engine.chaos.kinds``: its
``kind`` field (a one-value Literal) names it, its class variables give its title,
description, performer and menu place, and its methods say it in words (``phrase``, and
``outcome`` for a kind whose effect depends on the run) and judge its recovery from what
the supervisor sees (``step_shows``, ``event_shows``, ``applied_shows``, ``settled``).
Who carries it out is its performer's module (the supervisor's or the trainer's
``chaos.performers``, whose performer names the kind by its model). ``engine.chaos.table``
collects every kind; nothing else names one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from engine.domain import TelemetrySample

Performer = Literal["supervisor", "trainer"]
MIB = 1 << 20
EVERY_RANK = -1  # a request's rank that means every rank (a form shows ints only)
S = TypeVar("S")


def rank_outside(request: Any, world: int) -> str | None:
    """Why ``request`` aims past the run's ``world`` ranks (train.ranks x train.nodes); None
    when it aims at one of them, at every rank, or at none (a kind without a rank)."""
    rank = getattr(request, "rank", EVERY_RANK)
    if rank == EVERY_RANK or rank < world:
        return None
    return f"rank {rank} is not in this run: its ranks are 0 to {world - 1} (-1: every rank)"


class RunFacts(Protocol):
    """What an outcome sentence needs of one run (``memtui.run_facts.RunFacts``)."""

    @property
    def verified_steps(self) -> tuple[int, ...]: ...
    @property
    def on_disk(self) -> int: ...
    @property
    def on_preemption(self) -> bool: ...
    @property
    def max_restarts(self) -> int: ...


@dataclass
class Pending:
    """One injection waiting for its verdict."""

    chaos_id: str
    kind: str
    params: dict[str, Any]
    at: float
    """Time of the injection (s since the epoch)."""
    attempt: int
    """The trainer attempt running when it was injected."""
    applied_step: int | None = None
    """The step the trainer says it applies from (``chaos_applied``)."""
    applied_attempt: int | None = None
    """The trainer attempt that applied it (its state dies with that process)."""
    saved_after: list[int] = field(default_factory=list)
    """Steps of checkpoints saved after the injection."""

    kind_state: Any = None
    """What its kind keeps while it tracks this injection (``own``); None until asked."""

    def own(self, state: type[S]) -> S:
        """The kind's own tracking state, of the kind's own type, made on first use (a kind
        that counts or remembers something declares a dataclass for it beside its model)."""
        if self.kind_state is None:
            self.kind_state = state()
        if not isinstance(self.kind_state, state):
            raise TypeError(
                f"{self.kind}'s state is a {type(self.kind_state).__name__}, not {state.__name__}"
            )
        return self.kind_state

    def burst(self) -> int:
        """Steps the injection lasts (K), 0 for kinds without a length."""
        return int(self.params.get("steps") or 0)


@dataclass(frozen=True)
class Saved:
    tag: str
    step: int


@dataclass(frozen=True)
class CheckpointNews:
    """What one recorded event says of the checkpoints (``chaos_recovery`` reads it)."""

    saved: Saved | None = None
    failed: bool = False
    """A save failed."""
    rejected: tuple[str, str] | None = None
    """A tag a load rejected, and why."""
    loaded: tuple[str, tuple[str, ...]] | None = None
    """The tag a load took, and the ``tag: why`` of those it skipped."""


class ChaosKind(BaseModel):
    """The base of every kind's request model (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    if TYPE_CHECKING:
        kind: str  # each kind's own field: ``kind: Literal["its name"] = "its name"``

    title: ClassVar[str]
    """What a menu calls it."""
    description: ClassVar[str]
    """What it does to the run, in one sentence: the confirmation says it."""
    performer: ClassVar[Performer]
    order: ClassVar[int]
    """Its place in menus and listings (smaller first)."""
    recovered_when: ClassVar[str]
    """What the run shows once it has recovered, in words (the docs' table of kinds says it;
    the signals below judge it)."""
    owned_by_the_trainer: ClassVar[bool] = False
    """Its effect lives in the trainer process until a count runs out: a restart ends it,
    so a newer attempt training is its recovery."""
    decided_by_the_performer: ClassVar[bool] = False
    """Its verdict is its performer's, when it performs it (e.g. how many consoles closed),
    not a signal the tracker waits for."""
    scheduled_by_default: ClassVar[bool] = True
    """``memtui endure`` draws it when the run's ``[chaos]`` names no kinds."""

    @classmethod
    def name(cls) -> str:
        return str(cls.model_fields["kind"].default)

    # ------------------------------------------------------------------ words

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        """What injecting it with ``values`` (defaults filled in) does, in one sentence."""
        return cls.description

    @classmethod
    def outcome(cls, values: Mapping[str, Any], run: RunFacts) -> str | None:
        """What it really does to one run, given its facts; None: ``phrase`` says it all."""
        return None

    @classmethod
    def depends_on_the_run(cls) -> bool:
        """Its ``outcome`` is its own: a confirmation reads the run's facts first."""
        return cls.outcome.__func__ is not ChaosKind.outcome.__func__  # type: ignore[attr-defined]

    # --------------------------------------------------------------- recovery

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        """What a step shows of its recovery once applied (None: nothing yet)."""
        return None

    @classmethod
    def event_shows(cls, pending: Pending, news: CheckpointNews) -> str | None:
        """What a recorded event's news shows of its recovery (None: nothing)."""
        return None

    @classmethod
    def applied_shows(cls, pending: Pending, step: int) -> str | None:
        """Its own ``chaos_applied`` (at ``step``) is its recovery (None: not by itself)."""
        return None

    @classmethod
    def releases(cls, held: Pending) -> bool:
        """Applying it ends ``held`` (another injection), e.g. a release ends held ballast."""
        return False

    @classmethod
    def settled(cls, pending: Pending, state: str) -> str | None:
        """The run ended as ``state`` while it waited: recovered, in words (None: not)."""
        return None


def steps_words(n: Any) -> str:
    return "1 step" if n == 1 else f"{n} steps"


def steps_reached(pending: Pending, sample: TelemetrySample, end: int) -> str | None:
    """The recovery of a kind that lasts ``pending.burst()`` steps: ``end`` reached."""
    if pending.applied_step is not None and sample.step >= end:
        return f"step {sample.step} reached, {pending.burst()} steps after step {pending.applied_step}"
    return None


def healthy_step(sample: TelemetrySample, end: int) -> str | None:
    """The recovery of a numerics kind: a step at or after ``end`` with a finite loss."""
    if sample.step >= end and math.isfinite(sample.loss) and not sample.overflow:
        return f"step {sample.step}: finite loss {sample.loss:.4g}, no overflow"
    return None
