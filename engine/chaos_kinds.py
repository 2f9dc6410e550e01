"""The failures an operator (or a schedule) can inject into a live run, and their parameters.

One request model per kind, discriminated by ``kind``; every parameter has a default, bounds
and a docstring, so a console builds its form from ``chaos_specs()`` and a shell command
from the same fields, and a bad value is refused naming the field. ``performer`` says who
carries a kind out: the supervisor itself (kill, preempt, corrupt the newest checkpoint,
drop the consoles, a planner storm) or the trainer at its next step boundary, through the
same hooks the start-time environment variables use (memory pressure, an OOM, NaN loss,
an overflow burst, a loss spike, slow steps, a full disk). Torch-free: both sides read it.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

Performer = Literal["supervisor", "trainer"]
MIB = 1 << 20


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    title: ClassVar[str]
    """What a menu calls it."""
    description: ClassVar[str]
    """What it does to the run, in one sentence: the confirmation says it."""
    performer: ClassVar[Performer]


class Ballast(_Request):
    title = "memory pressure"
    description = "the trainer holds extra memory (ballast) for a number of steps, or until released"
    performer = "trainer"
    kind: Literal["ballast"] = "ballast"
    bytes: int = Field(256 * MIB, ge=1, le=1 << 40)
    """Bytes of ballast held on the training device (host memory on the CPU)."""
    steps: int = Field(50, ge=0, le=10**7)
    """Optimizer steps it is held; 0: until a ``release`` request."""


class Release(_Request):
    title = "release memory pressure"
    description = "the trainer lets go of any ballast it holds"
    performer = "trainer"
    kind: Literal["release"] = "release"


class Oom(_Request):
    title = "out of memory"
    description = "an out-of-memory error in the next optimizer step's first micro-batch"
    performer = "trainer"
    kind: Literal["oom"] = "oom"
    phase: Literal["forward", "backward"] = "forward"
    """Where the error is raised: the forward pass, or part way through the backward."""


class NanLoss(_Request):
    title = "NaN loss"
    description = "the loss becomes NaN (or inf) for a number of steps; those steps are skipped"
    performer = "trainer"
    kind: Literal["nan_loss"] = "nan_loss"
    steps: int = Field(3, ge=1, le=10_000)
    """Optimizer steps whose loss is not finite."""
    value: Literal["nan", "inf"] = "nan"
    """What the loss becomes."""


class Overflow(_Request):
    title = "fp16 overflow burst"
    description = (
        "the fp16 gradients overflow for a number of steps: each is skipped and the loss scale halves"
    )
    performer = "trainer"
    kind: Literal["overflow"] = "overflow"
    steps: int = Field(3, ge=1, le=10_000)
    """Optimizer steps that overflow in a row."""


class Spike(_Request):
    title = "loss spike"
    description = (
        "one poisoned optimizer step: its loss is multiplied in the forward pass, so its "
        "gradients (and the optimizer's moments) take the blow as a real bad batch does"
    )
    performer = "trainer"
    kind: Literal["spike"] = "spike"
    factor: float = Field(1000.0, ge=1.0, le=1e6, allow_inf_nan=False)
    """What the step's loss is multiplied by (the loss it reports, trains on and backpropagates)."""


EVERY_RANK = -1  # a slow_steps request's rank that slows every rank (a form shows ints only)


class SlowSteps(_Request):
    title = "slow steps"
    description = "each of a number of steps takes longer (added latency with jitter)"
    performer = "trainer"
    kind: Literal["slow_steps"] = "slow_steps"
    steps: int = Field(20, ge=1, le=10**6)
    """Optimizer steps slowed down."""
    delay_s: float = Field(0.2, ge=0.0, le=600.0, allow_inf_nan=False)
    """Seconds added to each of them."""
    jitter_s: float = Field(0.05, ge=0.0, le=600.0, allow_inf_nan=False)
    """Up to this many seconds more, drawn at random per step."""
    rank: int = Field(EVERY_RANK, ge=EVERY_RANK, le=65535)
    """Only this (global) rank is slowed, a straggler the others wait for; -1: every rank."""


class DiskFull(_Request):
    title = "full disk for saves"
    description = "the next checkpoint saves fail as on a full disk (every older checkpoint is kept)"
    performer = "trainer"
    kind: Literal["disk_full"] = "disk_full"
    saves: int = Field(1, ge=1, le=1000)
    """Saves that fail."""


class Kill(_Request):
    title = "kill the trainer"
    description = (
        "SIGKILL of the trainer: the restart policy decides (a restart resumes from the newest "
        "verified checkpoint, or from step 0 when the run never had one)"
    )
    performer = "supervisor"
    kind: Literal["kill"] = "kill"


class Preempt(_Request):
    title = "preemption"
    description = (
        "SIGTERM to the trainer, as a preempting host sends: it saves within the grace period and "
        "exits; it is restarted only when the run's restart.on_preemption says so"
    )
    performer = "supervisor"
    kind: Literal["preempt"] = "preempt"


class CorruptCheckpoint(_Request):
    title = "corrupt the newest checkpoint"
    description = (
        "bytes flipped in the newest checkpoint's largest file (its size unchanged): a resume "
        "must reject it and load an older one if one verifies, else refuse to start over"
    )
    performer = "supervisor"
    kind: Literal["corrupt_checkpoint"] = "corrupt_checkpoint"


class DropConsoles(_Request):
    title = "drop every console"
    description = "every console connection is closed; consoles reconnect and replay what they missed"
    performer = "supervisor"
    kind: Literal["drop_consoles"] = "drop_consoles"


class PlannerStorm(_Request):
    title = "hostile planner storm"
    description = "a burst of malformed or out-of-bounds directives at once: the policy must refuse them"
    performer = "supervisor"
    kind: Literal["planner_storm"] = "planner_storm"
    count: int = Field(100, ge=1, le=100_000)
    """Directives in the burst."""


ChaosRequest = Annotated[
    Ballast
    | Release
    | Oom
    | NanLoss
    | Overflow
    | Spike
    | SlowSteps
    | DiskFull
    | Kill
    | Preempt
    | CorruptCheckpoint
    | DropConsoles
    | PlannerStorm,
    Field(discriminator="kind"),
]
CHAOS_ADAPTER: TypeAdapter[ChaosRequest] = TypeAdapter(ChaosRequest)
REQUESTS: dict[str, type[_Request]] = {
    m.model_fields["kind"].default: m for m in typing.get_args(typing.get_args(ChaosRequest)[0])
}
"""Kind -> its request model, in menu order."""
ChaosKind = Literal[
    "ballast",
    "release",
    "oom",
    "nan_loss",
    "overflow",
    "spike",
    "slow_steps",
    "disk_full",
    "kill",
    "preempt",
    "corrupt_checkpoint",
    "drop_consoles",
    "planner_storm",
]


# ------------------------------------------------------------------ what is offered


class ChaosParamSpec(BaseModel):
    """One parameter of a kind, as a form shows it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: Literal["int", "float", "choice"]
    default: int | float | str
    minimum: float | None = None
    maximum: float | None = None
    choices: list[str] = Field(default_factory=list)
    help: str = ""


class ChaosKindSpec(BaseModel):
    """A kind the engine can inject now, with its parameters (sent in ``Welcome``)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    title: str
    description: str
    performer: Performer
    params: list[ChaosParamSpec] = Field(default_factory=list)


def chaos_specs(kinds: typing.Iterable[str] | None = None) -> list[ChaosKindSpec]:
    """The specs of ``kinds`` (default: every kind), in menu order."""
    wanted = set(REQUESTS) if kinds is None else set(kinds)
    return [_spec(model) for kind, model in REQUESTS.items() if kind in wanted]


def _spec(model: type[_Request]) -> ChaosKindSpec:
    params = [_param(name, field) for name, field in model.model_fields.items() if name != "kind"]
    return ChaosKindSpec(
        kind=model.model_fields["kind"].default,
        title=model.title,
        description=model.description,
        performer=model.performer,
        params=params,
    )


def _param(name: str, field: Any) -> ChaosParamSpec:
    annotation = field.annotation
    choices = (
        [str(c) for c in typing.get_args(annotation)] if typing.get_origin(annotation) is Literal else []
    )
    bounds = {type(m).__name__: m for m in field.metadata}
    low = getattr(bounds.get("Ge"), "ge", None)
    high = getattr(bounds.get("Le"), "le", None)
    kind: Literal["int", "float", "choice"] = "choice" if choices else "int" if annotation is int else "float"
    return ChaosParamSpec(
        name=name,
        type=kind,
        default=field.default,
        minimum=low,
        maximum=high,
        choices=choices,
        help=field.description or "",
    )


class ChaosConfig(BaseModel):
    """Scheduled chaos: an unattended run attacked at random, but reproducibly.

    Every ``every_steps`` optimizer steps on average a kind drawn by ``kinds``' weights is
    injected with its default parameters; the schedule is a function of ``seed`` alone, so
    the same seed attacks the same steps with the same kinds. Off while ``kinds`` is empty."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    kinds: dict[ChaosKind, float] = Field(default_factory=dict)
    """Kind -> weight (relative, > 0), e.g. ``{kill = 1, nan_loss = 2}``; empty: no schedule."""
    every_steps: int = Field(1000, ge=1, le=10**9)
    """Mean optimizer steps between two scheduled injections."""
    seed: int = Field(0, ge=0, le=2**31 - 1)
    """Seeds the schedule (which steps, which kinds)."""
    recovery_timeout_s: float = Field(600.0, gt=0.0, le=7 * 86400.0)
    """Seconds an injection may take to recover before ``chaos_recovered`` says it did not."""

    @model_validator(mode="after")
    def _weights_positive(self) -> ChaosConfig:
        for kind, weight in self.kinds.items():
            if not weight > 0:
                raise ValueError(f"kinds.{kind}: the weight must be > 0, got {weight!r}")
        return self


def parse_request(kind: str, params: dict[str, Any]) -> ChaosRequest:
    """A request from loose values (a shell's ``--param value``); raises pydantic's
    ValidationError naming the field, or ValueError for an unknown kind."""
    if kind not in REQUESTS:
        raise ValueError(f"unknown chaos kind {kind!r} (choose from {', '.join(REQUESTS)})")
    return CHAOS_ADAPTER.validate_python({"kind": kind, **params})
