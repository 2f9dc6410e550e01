"""The run's vocabulary that every side reads: telemetry, events, status, directive fields.

Torch-free and textual-free: the console, the supervisor and the trainer all read these.
Every model is strict about unknown keys (``extra="forbid"``), so a typo on the wire is an
error that names the field instead of a silently ignored value. The run's configuration is
``engine.config.run_config``; reading it from files is ``engine.config.config_file``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.measures.eval_summary import EvalSummary
from engine.measures.memory_scale import MemoryLevel, memory_level, room_share
from engine.measures.throughput_figures import ThroughputFigures

Severity = Literal["info", "warning", "critical"]
RunState = Literal[
    "starting",  # supervisor up, trainer not yet reporting
    "running",
    "paused",
    "restarting",  # trainer died, a new attempt is on its way
    "stopping",  # graceful stop asked: finish the step, checkpoint, exit
    "stopped",  # ended on request
    "completed",  # reached its target step
    "failed",  # ended by an error it could not recover from
    "interrupted",  # the process tree is gone without an ending (power loss, kill -9)
]
TERMINAL_STATES: frozenset[str] = frozenset({"stopped", "completed", "failed", "interrupted"})

# Memory "kind" names what the four memory numbers measure, so nobody mistakes a CPU
# stand-in for VRAM: "cuda" = torch.cuda allocator counters and device capacity;
# "cpu-rss" = process resident set size standing in for allocated/reserved, with the
# configured budget (or host RAM) standing in for capacity.
MemoryKind = Literal["cuda", "cpu-rss"]

EXIT_NO_CHECKPOINT = 66  # EX_NOINPUT: the trainer refused to start, no checkpoint verifies
STACK_DUMP_SIGNAL = "SIGUSR1"  # every trainer rank dumps its Python stacks to its log on it
"""Trainer exit status for "checkpoints exist but none verifies": restarting cannot help."""


# ------------------------------------------------------------------------ directives
# What a directive may change, and the widest values anything may ask for. The run's
# ``PolicyConfig`` bounds (``PolicyConfig.bounds()``) are tighter and decide what is applied.

DirectiveField = Literal[
    "lr_multiplier", "gradient_clip_norm", "loss_scale_initial_power", "micro_batch_size"
]
DIRECTIVE_FIELDS: tuple[DirectiveField, ...] = (
    "lr_multiplier",
    "gradient_clip_norm",
    "loss_scale_initial_power",
    "micro_batch_size",
)
DirectiveState = Literal["pending", "approved", "clamped", "rejected", "expired", "applied"]
DirectiveValue = int | float

# The widest value each field may carry at the edge, inclusive. Absurd beyond these.
EDGE_LIMITS: dict[DirectiveField, tuple[float, float]] = {
    "lr_multiplier": (1e-6, 10.0),  # a factor on the schedule
    "gradient_clip_norm": (1e-6, 1e6),  # a global L2 norm
    "loss_scale_initial_power": (0, 40),  # 2**40 already overflows fp16 maths
    "micro_batch_size": (1, 65536),  # samples
}
INTEGER_FIELDS: frozenset[str] = frozenset({"loss_scale_initial_power", "micro_batch_size"})
# Set once, then the training state's: the fp16 scaler moves on from the power, the memory
# controller from the micro-batch (an OOM shrinks it), a checkpoint restores both; a
# restart never sends these again.
ONE_SHOT_FIELDS: frozenset[str] = frozenset({"loss_scale_initial_power", "micro_batch_size"})


Decision = Literal["allow", "clamp", "reject"]  # the policy's verdict
OperatorDecision = Literal["approve", "clamp", "reject"]  # an operator's (the policy re-checks)
Bounds = dict[DirectiveField, tuple[DirectiveValue, DirectiveValue]]


class Verdict(BaseModel):
    """The policy's decision on one directive, with what it was judged by: what the policy
    returns, what every directive event carries and what the store's decision rows are made of."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: Decision
    decision_id: str
    policy_revision: str
    """Short hash of the bounds and limits this verdict was judged by."""
    directive_id: str
    reasons: list[str] = Field(default_factory=list)
    patch: dict[DirectiveField, DirectiveValue] = Field(default_factory=dict)
    """What would be applied (empty when rejected)."""
    bounds: Bounds = Field(default_factory=dict)
    rate_limited: bool = False
    """Rejected for the rate limit alone (the queue stores these as a count, not one by one)."""

    @property
    def admitted(self) -> bool:
        return self.decision != "reject"


# ------------------------------------------------------------------------ telemetry


class RankMemory(BaseModel):
    """One rank's memory as it reported it through the ranks' collective (every few steps).

    Bytes; on the CPU the same stand-ins as the sample's own ``mem_*`` (see MemoryKind)."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=0)
    allocated: int = Field(ge=0)
    reserved: int = Field(ge=0)
    peak: int = Field(ge=0)
    """The step window's peak before the report (as the sample's ``mem_peak``)."""
    capacity: int = Field(ge=0)
    step_s: float | None = Field(None, ge=0.0)
    """Mean seconds of the rank's own work per step since its previous report: from the step's
    start to its gradient collective, so a rank waiting for a slow one does not count the wait
    (None: a trainer that did not measure it). On CUDA, the device's time (CUDA events)."""
    comm_s: float | None = Field(None, ge=0.0)
    """Mean seconds per step from its gradient collective to the step's end: the
    communication (including the wait for slower ranks) and the optimizer step."""
    data_wait_s: float | None = Field(None, ge=0.0)
    """Mean seconds per step the rank waited for its batches."""


class TelemetrySample(BaseModel):
    """One optimizer step as the trainer saw it. Memory in bytes, times in seconds."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    step: int = Field(ge=0)
    """Optimizer steps completed (DeepSpeed's global_steps) after this step."""
    ts: float
    """Unix time when the step finished."""
    attempt: int = Field(1, ge=1)
    """Trainer attempt (1 + restarts) that produced it."""
    samples: int = Field(ge=0)
    """Samples consumed so far over all ranks."""
    tokens: int = Field(ge=0)
    """Tokens (bytes) consumed so far over all ranks."""
    loss: float
    """Mean training loss of this step, nats per token; NaN/inf are reported as they are."""
    lr: float
    grad_norm: float | None = None
    """Global gradient norm before clipping; None where DeepSpeed does not compute it."""
    loss_scale: float | None = None
    """fp16 dynamic loss scale; None for bf16/fp32."""
    overflow: bool = False
    """This step overflowed in fp16 and was skipped."""
    overflow_count: int = Field(0, ge=0)
    """fp16 overflows so far in this run."""
    skipped_steps: int = Field(0, ge=0)
    """Optimizer steps skipped so far (DeepSpeed's skipped_steps)."""
    step_time_s: float = Field(ge=0.0)
    """Wall time of this optimizer step (all micro-batches)."""
    tokens_per_s: float = Field(ge=0.0)
    """Tokens of this step over its step time, all ranks."""
    model_tflops: float | None = Field(None, ge=0.0)
    """Model TFLOP/s of this step, all ranks: FLOPs per token (6N + attention) x tokens/s."""
    mfu: float | None = Field(None, ge=0.0)
    """Model FLOPs utilisation: model_tflops over the devices' peak (a fraction, at most 1);
    None when the device's peak is unknown, or under-measured (the step beat it)."""
    mem_allocated: int = Field(0, ge=0)
    mem_reserved: int = Field(0, ge=0)
    mem_peak: int = Field(0, ge=0)
    """The largest use in this step's window, on both devices (CUDA: max_memory_allocated
    since the step began; CPU: the largest RSS sampled in the step)."""
    mem_process_peak: int | None = Field(None, ge=0)
    """The trainer process's high-water mark since it started (CUDA: largest allocated;
    CPU: largest RSS sampled); None from trainers that did not report it."""
    mem_capacity: int = Field(0, ge=0)
    mem_kind: MemoryKind = "cpu-rss"
    """What the memory numbers measure; see MemoryKind."""
    mem_fragmentation: int | None = Field(None, ge=0)
    """CUDA: the step's largest bytes of split blocks not in use: part of reserved that no
    tensor uses and ``empty_cache`` cannot free, counted by the budget's cap (the
    controller adds it to every peak it judges); None on the CPU."""
    mem_device_used: int | None = Field(None, ge=0)
    """CUDA: the device's used bytes as the driver (NVML) counts them: every process's, plus
    CUDA contexts; None on the CPU or without NVML."""
    mem_step_peak: int | None = Field(None, ge=0)
    """Peak of this step alone (CUDA: max_memory_allocated since the step began; CPU: the
    largest RSS seen after a forward); what the predictive model is calibrated against."""
    mem_predicted: int | None = Field(None, ge=0)
    """The memory model's predicted peak for this step's micro-batch."""
    mem_budget: int | None = Field(None, ge=0)
    """The budget the memory controller steers by (memory.budget resolved to bytes)."""
    mem_baseline: int | None = Field(None, ge=0)
    """Bytes no micro-batch changes (model states, the CUDA context; on the CPU the
    process's resident torch and DeepSpeed), as the controller measured them. The memory
    levels are shares of the usable room, ``mem_budget - mem_baseline``."""
    mem_ballast: int | None = Field(None, ge=0)
    """Bytes of injected ballast (chaos, rehearsals) this rank held during the step, inside
    ``mem_step_peak``; None when none: a figure compared with a plan subtracts it."""
    checkpoint_stall_s: float | None = Field(None, ge=0.0)
    """Seconds training stood still for the checkpoint saved just before this step's report
    (saving is synchronous); None when no save came in between."""
    eval_s: float | None = Field(None, ge=0.0)
    """Seconds training stood still for the eval run since the previous report; None: none ran."""
    data_wait_s: float | None = Field(None, ge=0.0)
    """Seconds of the step the training thread waited for its batches (building them itself
    when nothing was built ahead): data starvation when it is a large share of
    ``step_time_s``. None from a trainer that does not measure it."""
    micro_batch: int = Field(ge=1)
    grad_accum: int = Field(ge=1)
    world_size: int = Field(1, ge=1)
    ranks: list[RankMemory] | None = None
    """Every rank's memory, rank order; only on the samples of steps where the ranks
    exchanged it (every ``train.rank_report_every`` steps) and only when world_size > 1."""
    metrics: dict[str, float] | None = None
    """The workload's own scalars (name -> mean over the step's micro-batches and ranks), as
    ``engine.measures.user_metrics.MetricScreen`` kept them; None when the workload reported none."""


class Event(BaseModel):
    """A durable happening, numbered by the store before anyone is told of it."""

    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1)
    """Store-assigned, strictly increasing within a run; clients replay from it."""
    ts: float
    type: str = Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_.]*$")
    """e.g. run_started, state_changed, trainer_started, checkpoint_saved, trainer_exited."""
    severity: Severity = "info"
    message: str = Field("", max_length=4096)
    """One line a person reads."""
    data: dict[str, Any] = Field(default_factory=dict)
    attempt: int | None = None


class DecisionRecord(BaseModel):
    """One verdict on one directive, as the store's ``decisions`` table keeps it.

    Every verdict gets a row, rate-limited ones included, while the event stream carries
    only the first rejection of a burst and a periodic count (so consoles are not flooded).
    """

    model_config = ConfigDict(extra="forbid")

    ts: float
    """Wall-clock seconds when the verdict was given."""
    decision_id: str
    """The policy's id for this verdict (unique within one supervisor's life)."""
    directive_id: str
    source: str
    """Who proposed it: operator, rules, command:NAME, openai:MODEL, ..."""
    verdict: Decision
    """The policy's decision."""
    state: str
    """The directive's state after it: pending, approved, clamped, rejected, expired."""
    reasons: list[str] = Field(default_factory=list)
    patch: dict[str, float | int] = Field(default_factory=dict)
    """What would be applied (empty when rejected)."""
    bounds: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """Field -> (low, high) the policy judged by."""
    policy_revision: str = ""
    rate_limited: bool = False
    operator: OperatorDecision | None = None
    """The operator's decision this row records (``verdict``: the re-check's); None: the policy's."""

    @classmethod
    def of(
        cls, verdict: Verdict, *, ts: float, source: str, state: str, reasons: list[str]
    ) -> DecisionRecord:
        """The row for ``verdict`` on a directive from ``source``, now in ``state``."""
        return cls(
            ts=ts,
            decision_id=verdict.decision_id,
            directive_id=verdict.directive_id,
            source=source,
            verdict=verdict.decision,
            state=state,
            reasons=reasons,
            patch=dict(verdict.patch),
            bounds=dict(verdict.bounds),
            policy_revision=verdict.policy_revision,
            rate_limited=verdict.rate_limited,
        )


class Thresholds(BaseModel):
    """The levels a run judges memory and numerics by, as the console needs them to colour
    its figures. No defaults here: they are built from the run's config
    (``RunConfig.thresholds()``), so each level has one source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_warn: float = Field(gt=0.0, le=1.0)
    """Memory / budget (or capacity) from which memory is at its warning level (``memory.warn``)."""
    memory_critical: float = Field(gt=0.0, le=1.0)
    """Memory / budget (or capacity) from which memory is critical (``memory.critical``)."""
    loss_scale_floor: float = Field(gt=0.0)
    """fp16 loss scale at or below which the scale is at its floor (``alerts.loss_scale_floor``)."""

    def memory_level(self, fraction: float) -> MemoryLevel:
        """Where ``fraction`` (used / budget or capacity) stands against the memory levels."""
        return memory_level(fraction, self.memory_warn, self.memory_critical)

    def room_level(self, used: int, limit: int, baseline: int | None) -> MemoryLevel:
        """The level of ``used`` bytes as the memory controller judges it: its share of the
        usable room (``limit - baseline``), or of ``limit`` when the baseline is unknown."""
        return self.memory_level(room_share(used, limit, baseline) if limit else 0.0)


class SaveReport(BaseModel):
    """How the newest checkpoint save of a run went, as its trainer reported it."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["saved", "failed", "skipped"]
    """saved (sealed and verified) | failed (a full disk mid-write, an I/O error) | skipped
    (too little free disk: not attempted)."""
    step: int
    tag: str
    reason: str | None = None
    """Why it failed or was skipped."""
    attempt: int | None = None
    """The trainer attempt that saved (or tried to)."""


class StartupStatus(BaseModel):
    """The phase a starting trainer is in (``engine.events.startup``), until its first step."""

    model_config = ConfigDict(extra="forbid")

    phase: str
    """``importing``, ``building_op``, ``waiting_for_build``, ``initialising``,
    ``loading_checkpoint`` or ``first_step``; before them, over several nodes,
    ``waiting_for_nodes`` (the supervisor's, while torchrun waits at the rendezvous)."""
    label: str
    """The phase in a few words (``building DeepSpeed op cpu_adam (once per environment)``)."""
    since: float
    """Unix time (s) the trainer entered it."""
    attempt: int


class RunStatus(BaseModel):
    """What ``memtui status --json`` prints and the supervisor answers to ``status``."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    run_id: str
    name: str
    state: RunState
    run_dir: str
    step: int = 0
    target_steps: int = 0
    loss: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    """The newest step's model FLOPs utilisation (a fraction; None: the peak is unknown)."""
    model_tflops: float | None = None
    """The newest step's model TFLOP/s, all ranks."""
    step_time_s: float | None = None
    """The newest step's wall time."""
    data_wait_s: float | None = None
    """Of it, the seconds the trainer waited for its batches (see TelemetrySample)."""
    loss_scale: float | None = None
    mem_allocated: int | None = None
    mem_reserved: int | None = None
    mem_peak: int | None = None
    mem_capacity: int | None = None
    mem_kind: MemoryKind | None = None
    mem_process_peak: int | None = None
    """The trainer process's high-water mark (bytes) at the newest sample."""
    mem_device_used: int | None = None
    """NVML's used bytes on the newest sample's device (CUDA only)."""
    mem_fragmentation: int | None = None
    """The newest step's fragmented bytes (CUDA only; see TelemetrySample)."""
    micro_batch: int | None = None
    grad_accum: int | None = None
    world_size: int | None = None
    metrics: dict[str, float] | None = None
    """The newest step's workload metrics (name -> value; see TelemetrySample)."""
    restarts: int = 0
    whole_tree_resumes: int = 0
    """Restarts across supervisor lives (one died with its trainer), apart from ``restarts``."""
    attempt: int = 0
    started_at: float | None = None
    updated_at: float | None = None
    """ts of the newest step sample."""
    supervisor_pid: int | None = None
    trainer_pid: int | None = None
    exit_reason: str | None = None
    """How the run ended, in words, once it has."""
    held_by: str | None = None
    """Who holds training at a step boundary, while someone does: ``operator`` (memtui
    pause), ``storage: REASON`` (the store cannot write; it goes on by itself), or both."""
    ranks: list[RankMemory] | None = None
    """Several ranks: every rank's memory from the newest rank report (``ranks_step``)."""
    ranks_step: int | None = None
    checkpoint_step: int | None = None
    """Step of the newest checkpoint that verifies in full now (the catalog's word, not the
    ``latest`` pointer's nor the newest save event's): where a resume starts; None when none
    does (or, read with no verification, unknown: see ``checkpoint_rejected``)."""
    checkpoint_rejected: list[str] = Field(default_factory=list)
    """``tag: problem`` of every checkpoint newer than ``checkpoint_step`` that does not
    verify (a resume skips it)."""
    last_save: SaveReport | None = None
    """The newest save's outcome: a failed or skipped one (a final save on a full disk)
    shows here while ``checkpoint_step`` stays at the older checkpoint."""
    last_eval: EvalSummary | None = None
    """The newest eval (``eval_completed``): its step, held-out loss and the workload's scalars."""
    last_seq: int = 0
    node: str | None = None
    """A run over several nodes: this node's place in words (node 0 holds the run; the
    others follow it); None on one host."""
    throughput: ThroughputFigures | None = None
    """Tokens/s average and peak over the whole run and over the current attempt (the store's
    steps; None where the store cannot be read)."""
    startup: StartupStatus | None = None
    """While the current trainer starts (a live supervisor's word): its phase and since when."""


def slowest_rank(ranks: Iterable[RankMemory]) -> RankMemory | None:
    """The rank the others wait for at the gradient collective: the one with the most own
    time per step (``RankMemory.step_s``, its work up to that collective; the lower rank on
    a tie). None unless at least two ranks reported one. Read by the console's rank rows and
    ``memtui status``."""
    timed = [r for r in ranks if r.step_s is not None]
    return max(timed, key=lambda r: (r.step_s or 0.0, -r.rank)) if len(timed) > 1 else None
