"""The run's own events and its trainer processes': state, stop and pause, launches, exits, restarts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from engine.domain import TERMINAL_STATES, RunState
from engine.events.memory import PlannedMemory
from engine.events.payload import Payload


class RunStarted(Payload):
    event_type = "run_started"
    supervisor_pid: int
    run_dir: str
    previous_state: RunState | None = None
    """The state the store held before this supervisor (None: a new run)."""
    trainer_outlived: bool = False
    """The previous supervisor died alone: its trainer went on, saved and said so in its
    spool (not a whole-tree death, such as a reboot)."""

    @property
    def after_whole_tree_death(self) -> bool:
        """This supervisor brought back a run whose supervisor died with its trainer (its
        state never reached an ending): a restart of the trainer across supervisor lives."""
        previous = self.previous_state
        return previous is not None and previous not in TERMINAL_STATES and not self.trainer_outlived


class ReportsRecovered(Payload):
    """What a trainer reported while no supervisor heard it, taken in from its spool."""

    event_type = "reports_recovered"
    steps: int
    events: int
    refused: int = 0
    attempts: list[int] = Field(default_factory=list)


class SocketRestored(Payload):
    """The run's socket file was removed while the run went on (an ``rm``, a cleaner of the
    directory); the supervisor bound it again, so consoles and the CLI reach the run again.
    A file someone else put in its place is left alone."""

    event_type = "socket_restored"
    severity = "warning"


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
    standby: bool = False
    """The attempt was handed to the waiting spare (``restart.standby``): no cold start."""
    head_start: bool = False
    """The attempt was handed to the spare its supervisor started with itself
    (``engine.supervisor.trainers.spare_launch``): a cold start, begun before the supervisor was ready."""


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
    limit: str | None = None
    """The limit that stopped the run, in words (``restart.max_restarts`` and its value)."""


class TrainerHung(Payload):
    """No sign of life from a running trainer for ``quiet_s``: its stacks were asked for and
    its processes killed; the restart follows as for any unasked death."""

    event_type = "trainer_hung"
    severity = "critical"
    attempt: int
    quiet_s: float
    """Seconds since its last step or start-up phase."""
    limit_s: float
    """The hang limit it passed (``restart.hang_s``, or derived from the run's pace)."""
    last_step: int
    stacks_log: str
    """Where its ranks' Python stacks were kept, relative to the run directory (``stacks``:
    one file per rank, named in the ``stacks_collected`` just before; older runs: a log)."""
    stacks_dumped: int = 0
    """Ranks whose dump came (0: none came in time)."""


class StacksCollected(Payload):
    """Every rank's Python stacks, collected while the trainer was quiet (the heartbeat
    alert, or a hang before its kill): one file per rank and where each rank is."""

    event_type = "stacks_collected"
    severity = "warning"
    attempt: int
    rule: str
    """The alert or ending that asked: ``heartbeat`` or ``trainer_hung``."""
    files: dict[str, str] = Field(default_factory=dict)
    """Rank -> its dump's file, relative to the run directory (ranks that answered)."""
    where: dict[str, str] = Field(default_factory=dict)
    """Rank -> the innermost frame of the training code in its dump (``file:line in func``)."""
    stopped: list[int] = Field(default_factory=list)
    """Ranks found stopped (SIGSTOP): continued just for their dump, then stopped again."""
    silent: list[int] = Field(default_factory=list)
    """Ranks asked that wrote no dump in time."""
    flight: list[str] = Field(default_factory=list)
    """NCCL flight recorder dumps present in the run directory (CUDA runs)."""


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
    flops_per_token: float | None = None
    """Model FLOPs per token of a training step (6N plus the attention term)."""
    peak_tflops: float | None = None
    """One device's peak TFLOP/s at the run's precision, the MFU's denominator."""
    peak_source: str | None = None
    """``config``, ``table (KEY)``, ``measured`` (the CPU's matmul probe) or ``unknown``."""
    planned_memory: PlannedMemory | None = None
    """What ``memtui plan`` predicts per rank for this configuration, by part."""
    model_description: dict[str, Any] | None = None
    """The model built: parameters counted from the module, its shape and source, as
    ``engine.memory.model_description.ModelDescription.as_wire`` writes it (read back by
    ``from_wire``; a plain mapping because the contract imports no engine package)."""
    activation_checkpointing: bool = False
    """The model recomputes its activations in backward (``train.activation_checkpointing``)."""


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
