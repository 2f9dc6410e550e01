"""Every event type a run records, and the typed payload of each.

An event in the store and on the wire is ``engine.domain.Event``: a ``type``, a severity, a
line for people and ``data``, a JSON object. Here every type has a payload model that says
what its ``data`` holds. Writers build the payload and record it (the supervisor's journal,
the trainer's link); readers ask ``Model.of(event)``, which answers the typed payload, or
None when the event is of another type or its data does not fit (a store written by an
older memtui, a damaged row): a reader never crashes on an event.

Payloads accept keys they do not know (a newer writer may add some) and keep them, so an
event read and written again loses nothing. ``PAYLOADS`` maps each type to its model, and
``Payload.origin`` says who may record it: the trainer's events arrive as ``TrainerEvent``
messages, and a trainer that claims a supervisor's type is refused. Torch-free.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.domain import (
    Event,
    RunState,
    Severity,
    Verdict,
)
from engine.hardware_report import DoctorReport
from engine.protocol import DirectiveView

Origin = Literal["supervisor", "trainer"]
P = TypeVar("P", bound="Payload")

PAYLOADS: dict[str, type[Payload]] = {}
"""Event type -> its payload model, every type memtui records."""


class Payload(BaseModel):
    """The ``data`` of one event type; subclasses name it in ``event_type``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, ser_json_inf_nan="constants")

    event_type: ClassVar[str]
    origin: ClassVar[Origin] = "supervisor"
    severity: ClassVar[Severity] = "info"
    """The usual severity; a writer may record one instance with another."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "event_type" in cls.__dict__:
            if cls.event_type in PAYLOADS:
                raise TypeError(f"event type {cls.event_type!r} is defined twice")
            PAYLOADS[cls.event_type] = cls

    @classmethod
    def of(cls: type[P], event: Event) -> P | None:
        """This event's payload, or None if it is another type or its data does not fit."""
        if event.type != cls.event_type:
            return None
        try:
            return cls.model_validate(event.data)
        except ValidationError:
            return None

    def data(self) -> dict[str, Any]:
        """The JSON object stored as the event's ``data``."""
        return self.model_dump(mode="json", by_alias=True)


class Recorder(Protocol):
    """What records an event: the supervisor's journal, handed to the parts that raise them."""

    def __call__(self, payload: Payload, message: str = "", *, severity: Severity | None = None) -> Event: ...


def payload_of(event: Event) -> Payload | None:
    """The typed payload of any known event type (None: unknown type or data that does not fit)."""
    model = PAYLOADS.get(event.type)
    return None if model is None else model.of(event)


# ------------------------------------------------------------------ the run itself


class RunStarted(Payload):
    event_type = "run_started"
    supervisor_pid: int
    run_dir: str
    previous_state: RunState | None = None
    """The state the store held before this supervisor (None: a new run)."""


class RunEnded(Payload):
    event_type = "run_ended"
    state: RunState
    reason: str


class StateChanged(Payload):
    event_type = "state_changed"
    from_state: RunState | None = Field(None, alias="from")
    to: RunState


class StopRequested(Payload):
    event_type = "stop_requested"
    reason: str


HoldCause = Literal["operator", "storage"]
"""Who holds training: the operator (``memtui pause``), or the supervisor while the run's
store cannot write (it lets training go on by itself once the store writes again)."""


class PauseRequested(Payload):
    event_type = "pause_requested"
    reason: str
    cause: HoldCause = "operator"


class ContinueRequested(Payload):
    event_type = "continue_requested"
    reason: str
    cause: HoldCause = "operator"


class PauseKept(Payload):
    """A run paused when its last supervisor ended comes back paused."""

    event_type = "pause_kept"
    previous_state: RunState | None = None


# -------------------------------------------------------------- trainer processes


class TrainerLaunched(Payload):
    event_type = "trainer_launched"
    attempt: int
    pid: int
    command: list[str]


class TrainerLaunchFailed(Payload):
    event_type = "trainer_launch_failed"
    severity = "critical"


class TrainerExited(Payload):
    event_type = "trainer_exited"
    attempt: int
    returncode: int
    """Exit status; negative = killed by that signal."""
    signal: str | None = None
    reason: str
    error: str | None = None
    """The trainer's own last error, if it said one."""


class TrainerRestarted(Payload):
    event_type = "trainer_restarted"
    severity = "warning"
    cause: str
    returncode: int
    signal: str | None = None
    last_step: int
    """Newest step the dead attempt reported."""
    candidate_step: int | None = None
    """Step of the newest checkpoint whose files look complete (a quick check): where the next
    attempt resumes if its full verification passes. None: no checkpoint (from scratch). What
    the restart really cost is ``trainer_resumed``'s, once the trainer has verified and loaded."""
    resume_step: int | None = None
    """Written by memtui before ``trainer_resumed`` existed (the candidate, taken for the truth)."""
    steps_lost: int | None = None
    """Likewise: ``last_step - resume_step`` of the candidate. Read ``trainer_resumed`` instead."""
    delay_s: float
    """Backoff before the next attempt, s."""
    restarts: int
    """Restarts of this run so far, this one included."""
    streak: int
    """Restarts in a row without a new checkpoint."""
    next_attempt: int


class TrainerResumed(Payload):
    """Where a restarted run really resumed: recorded when the new attempt's trainer has
    verified and loaded a checkpoint (or started afresh), so ``steps_lost`` is the true cost."""

    event_type = "trainer_resumed"
    attempt: int
    resume_step: int
    """Step of the checkpoint the trainer verified and loaded (0: from scratch)."""
    last_step: int
    """Newest step reported before the restart."""
    steps_lost: int
    """Steps trained again: ``last_step - resume_step`` (never negative)."""
    candidate_step: int | None = None
    """The checkpoint the restart was announced with; differs from ``resume_step`` when it
    failed its full verification (``skipped`` says why)."""
    skipped: list[str] = Field(default_factory=list)
    """Newer checkpoints the trainer rejected, with why."""

    @property
    def as_announced(self) -> bool:
        """The announced candidate is what was loaded."""
        return (self.candidate_step or 0) == self.resume_step


class RestartsExhausted(Payload):
    event_type = "restarts_exhausted"
    severity = "critical"
    streak: int
    cause: str


class ChaosInjected(Payload):
    event_type = "chaos"
    severity = "warning"
    action: str
    params: dict[str, Any] = Field(default_factory=dict)
    pid: int | None = None


# ------------------------------------------------------------ the trainer's events


class TrainerStarted(Payload):
    event_type = "trainer_started"
    origin = "trainer"
    attempt: int
    pid: int
    device: str
    """``cpu`` or ``cuda``."""
    world_size: int
    params: int
    precision: str
    zero_stage: int
    micro_batch: int
    grad_accum: int
    resumed_from_step: int | None = None


class TrainerFinished(Payload):
    event_type = "trainer_finished"
    origin = "trainer"
    reason: Literal["completed", "stopped"]
    step: int


class TrainerError(Payload):
    event_type = "trainer_error"
    origin = "trainer"
    severity = "critical"
    error: str
    """The exception's class name."""
    restartable: bool | None = None
    """False: a restart cannot help (no checkpoint verifies, OOM at the smallest
    micro-batch, the fp16 loss-scale floor); None: the trainer does not know."""
    traceback: str | None = None


class RunPaused(Payload):
    event_type = "run_paused"
    origin = "trainer"
    step: int


class RunContinued(Payload):
    event_type = "run_continued"
    origin = "trainer"
    step: int
    paused_s: float


class MemoryExhausted(Payload):
    """Out of memory at the smallest micro-batch: the trainer stops with a checkpoint."""

    event_type = "memory_exhausted"
    origin = "trainer"
    severity = "critical"
    step: int
    restartable: bool


class LossScaleFloor(Payload):
    """fp16 loss scale at its minimum and still overflowing: the run diverged."""

    event_type = "loss_scale_floor"
    origin = "trainer"
    severity = "critical"
    step: int
    restartable: bool


# -------------------------------------------------------------------- checkpoints


class CheckpointSaved(Payload):
    event_type = "checkpoint_saved"
    origin = "trainer"
    step: int
    tag: str
    seconds: float
    """Training stood still this long for the save (s)."""
    write_s: float
    """DeepSpeed's write of the files (s)."""
    seal_s: float
    """fsync, hashes, manifest, rename, verify, prune (s)."""
    background: bool
    """Sealed on the background thread while training went on."""
    size_bytes: int
    pruned: list[str] = Field(default_factory=list)
    """Tags deleted after this one verified."""


class CheckpointNotSaved(Payload):
    """A save that did not happen; every older checkpoint is kept."""

    origin = "trainer"
    severity = "critical"
    step: int
    tag: str
    reason: str
    free_bytes: int | None = None
    needed_bytes: int | None = None


class CheckpointSkipped(CheckpointNotSaved):
    """Not attempted: too little free disk."""

    event_type = "checkpoint_skipped"


class CheckpointFailed(CheckpointNotSaved):
    """Attempted and failed (a full disk mid-write, an I/O error)."""

    event_type = "checkpoint_failed"


class CheckpointRejected(Payload):
    """A checkpoint that does not verify (or was half-written), set aside on resume."""

    event_type = "checkpoint_rejected"
    origin = "trainer"
    severity = "warning"
    tag: str
    problem: str
    step: int | None = None
    quarantined: str | None = None
    """Its name in ``checkpoints/quarantine/`` once moved there (a staging dir a crash left)."""


class CheckpointLoaded(Payload):
    event_type = "checkpoint_loaded"
    origin = "trainer"
    step: int
    tag: str
    skipped: list[str] = Field(default_factory=list)
    """Newer tags that did not verify, with why."""


class FreshStart(Payload):
    """No checkpoint to resume from: training starts over (asked for, or none existed)."""

    event_type = "fresh_start"
    origin = "trainer"
    severity = "warning"


# --------------------------------------------------------------------------- memory


class MemoryAdapted(Payload):
    event_type = "memory_adapted"
    origin = "trainer"
    kind: str
    """``shrink``, ``grow``, ``oom`` or ``resume`` (the geometry an earlier OOM left)."""
    reason: str
    step: int
    from_micro_batch: int
    to_micro_batch: int
    from_grad_accum: int
    to_grad_accum: int
    mem_before: int | None = None
    """Bytes: the peak (measured or expected) that made the controller act."""
    mem_after_predicted: int | None = None
    mem_budget: int | None = None
    mem_kind: str | None = None
    mem_resident_after: int | None = None
    """After an OOM: the process's memory once the smaller micro-batch is in place."""


class MemoryLevel(Payload):
    event_type = "memory_level"
    origin = "trainer"
    step: int
    level: Literal["ok", "warn", "critical"]
    previous: Literal["ok", "warn", "critical"]
    expected_peak: int
    """Bytes."""
    mem_budget: int


# ----------------------------------------------------------------------- directives


class DirectiveRecord(Payload):
    """A directive's view and the policy's verdict, as every directive event carries them."""

    directive: DirectiveView
    verdict: Verdict | None = None
    """The policy's verdict (every writer gives it; a reader needs only the view)."""


class DirectiveProposed(DirectiveRecord):
    event_type = "directive_proposed"


class DirectiveDecided(DirectiveRecord):
    event_type = "directive_decided"


class DirectiveApplied(Payload):
    """The trainer's echo of what it applied; the supervisor records it with the view."""

    event_type = "directive_applied"
    origin = "trainer"
    directive_id: str | None = None
    decision_id: str = ""
    step: int | None = None
    applied: dict[str, float | int] = Field(default_factory=dict)
    refused: dict[str, str] = Field(default_factory=dict)
    """Field -> why the trainer refused it."""
    directive: DirectiveView | None = None
    """Added by the supervisor when it records the echo."""
    verdict: Verdict | None = None


class DirectivesRateLimited(Payload):
    event_type = "directives_rate_limited"
    severity = "warning"
    source: str
    count: int
    policy_revision: str


class PlannerRestarted(Payload):
    event_type = "planner_restarted"
    severity = "warning"
    source: str
    failures: int
    pid: int | None = None


class PlannerDisabled(Payload):
    event_type = "planner_disabled"
    severity = "critical"
    source: str
    failures: int
    reason: str


# --------------------------------------------------------------- alerts and doctor

STORAGE_RULE = "storage"
"""The alert rule of a store that cannot write (firing until a write gets through)."""
TASK_FAILED_RULE = "supervisor_task"
"""The alert rule of a supervisor task that ended with an unexpected exception."""
INSTANT_RULES = frozenset({"restart", TASK_FAILED_RULE})
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


SUPERVISOR_EVENTS: frozenset[str] = frozenset(t for t, m in PAYLOADS.items() if m.origin == "supervisor")
"""Types only the supervisor records; a trainer that sends one is refused."""
