"""The run's vocabulary: configuration, telemetry, events and status.

Torch-free and textual-free: the console, the supervisor and the trainer all read these.
Every model is strict about unknown keys (``extra="forbid"``), so a typo in a config file
or on the wire is an error that names the field instead of a silently ignored value.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.config_override import OverrideError, parse_override

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

Precision = Literal["fp16", "bf16", "fp32"]
PresetName = Literal["tiny", "small"]
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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------- config


class ModelConfig(_Strict):
    """Shape of the built-in byte-level decoder-only transformer."""

    n_layer: int = Field(2, ge=1, le=96)
    """Transformer blocks."""
    n_head: int = Field(4, ge=1, le=128)
    """Attention heads per block; must divide d_model."""
    d_model: int = Field(64, ge=8, le=16384)
    """Residual stream width (channels)."""
    seq_len: int = Field(128, ge=8, le=65536)
    """Context length in bytes (tokens)."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout probability in attention and MLP."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        return self


class TrainConfig(_Strict):
    """Optimisation and batch geometry. Samples are sequences of ``model.seq_len`` bytes."""

    precision: Precision = "fp16"
    """fp16 uses DeepSpeed's dynamic loss scaling; bf16 and fp32 have none."""
    zero_stage: int = Field(0, ge=0, le=3)
    """DeepSpeed ZeRO stage."""
    micro_batch: int = Field(8, ge=1, le=65536)
    """Samples per forward/backward on one rank."""
    global_batch: int = Field(8, ge=1, le=1 << 24)
    """Samples per optimizer step over all ranks: micro_batch x grad_accum x world_size."""
    lr: float = Field(3e-3, gt=0.0, le=10.0)
    """Peak learning rate (after warm-up)."""
    min_lr: float = Field(3e-4, ge=0.0, le=10.0)
    """Learning rate at the end of the cosine decay."""
    warmup_steps: int = Field(50, ge=0)
    """Optimizer steps of linear warm-up."""
    weight_decay: float = Field(0.01, ge=0.0, le=1.0)
    grad_clip: float = Field(1.0, ge=0.0)
    """Global gradient-norm clip; 0 disables clipping."""
    initial_scale_power: int = Field(12, ge=0, le=40)
    """fp16 only: the dynamic loss scale starts at 2**initial_scale_power."""
    ranks: int = Field(1, ge=1, le=64)
    """Data-parallel trainer processes on this host; more than 1 starts them with torchrun
    (``python -m torch.distributed.run --standalone``), rank 0 talking to the supervisor."""
    rank_report_every: int = Field(10, ge=1)
    """With several ranks: optimizer steps between exchanges of every rank's memory."""

    @model_validator(mode="after")
    def _global_is_multiple(self) -> TrainConfig:
        per_step = self.micro_batch * self.ranks  # samples of one micro-batch on every rank
        if self.global_batch % per_step:
            raise ValueError(
                f"global_batch ({self.global_batch}) must be a multiple of micro_batch x ranks "
                f"({self.micro_batch} x {self.ranks})"
            )
        return self


class CheckpointConfig(_Strict):
    """When and how many checkpoints to keep (the Checkpoints issue makes them durable)."""

    every_steps: int = Field(500, ge=0)
    """Save every N optimizer steps; 0 saves only when the run stops."""
    keep: int = Field(3, ge=1, le=1000)
    """Newest checkpoints kept."""
    every_minutes: float = Field(0.0, ge=0.0)
    """Also save when this many wall-clock minutes passed since the last save; 0 = off."""
    milestone_every: int = Field(0, ge=0)
    """Keep every checkpoint whose step is a multiple of N for good (beyond ``keep``); 0 = none."""
    min_free_mb: int = Field(0, ge=0)
    """MiB that must stay free on the disk after a save; a save that would cut into it is
    skipped with an alert (the older checkpoints are kept)."""
    background: bool = True
    """Seal each save (fsync, sha256, manifest, rename, verify, prune) on a background
    thread while training goes on, so that training waits only for DeepSpeed's write of the
    files. A save is committed (``latest`` moves) when its seal ends; one seals at a time,
    and the final save when the run stops is always sealed before the trainer exits.
    False: training waits for the whole save."""
    stop_grace_s: float = Field(60.0, gt=0.0)
    """Seconds from a stop request or SIGTERM to SIGKILL: the trainer finishes its step and
    writes an emergency checkpoint in this time (a kill mid-save leaves the previous one)."""


class RestartConfig(_Strict):
    """How the supervisor restarts a trainer that died unasked (signal, crash, non-zero exit)."""

    max_restarts: int = Field(5, ge=0, le=10_000)
    """Restarts in a row without a new checkpoint before the run is failed; 0 never restarts."""
    backoff_initial_s: float = Field(1.0, ge=0.0)
    """Delay before the first restart of such a row; doubled for each further one."""
    backoff_max_s: float = Field(60.0, ge=0.0)
    """The delay never grows beyond this."""
    on_preemption: bool = False
    """Also restart a trainer that stopped itself on SIGTERM without the run being asked to
    stop (a preempted node); False ends the run as stopped."""


class MemoryConfig(_Strict):
    """Adaptive memory: the budget the controller steers by and how it reacts (issue 4).

    Fractions are of the budget. The controller shrinks the micro-batch (and raises the
    gradient accumulation, so samples per optimizer step stay ``train.global_batch``)
    before memory reaches ``critical``, and grows it back when headroom is steady.
    """

    budget: int | float | None = None
    """Bytes (an int > 1) or a fraction of the device's capacity (0 < x <= 1); None: the
    whole device (host RAM on the CPU). On CUDA made real with
    ``torch.cuda.set_per_process_memory_fraction``; on the CPU the capacity steered by."""
    adaptive: bool = True
    """Let the controller change the micro-batch; False keeps the configured geometry
    (OOMs are still recovered)."""
    warn: float = Field(0.85, gt=0.0, le=1.0)
    """Measured peak / budget at which the controller starts shrinking (with cool-down)."""
    critical: float = Field(0.95, gt=0.0, le=1.0)
    """Measured peak / budget at which it shrinks at once, cool-down or not."""
    hysteresis: float = Field(0.05, ge=0.0, lt=0.5)
    """A level is left only below its threshold minus this; shrinks aim below warn minus this."""
    grow_below: float = Field(0.70, gt=0.0, le=1.0)
    """Grow only while the predicted peak at the next larger micro-batch is below this."""
    steady_steps: int = Field(10, ge=1)
    """Optimizer steps of steady headroom before a growth."""
    cooldown_steps: int = Field(20, ge=0)
    """Optimizer steps from any geometry change to a growth or a warn-level shrink."""
    min_micro_batch: int = Field(1, ge=1)
    """Never shrink below this."""
    max_micro_batch: int | None = Field(None, ge=1)
    """Never grow above this; None: ``train.micro_batch``."""
    cpu_enforce: bool = False
    """CPU only: a forward that leaves the process's RSS over the budget raises MemoryError,
    standing in for the CUDA allocator's limit (so OOM recovery runs on the CPU)."""
    floor_skips: int = Field(10, ge=1)
    """fp16 at stage 0: consecutive skipped steps at the minimum loss scale that count as
    the loss-scale floor (an alert, then a stop with a checkpoint)."""

    @model_validator(mode="after")
    def _budget_and_levels(self) -> MemoryConfig:
        fraction_over_one = isinstance(self.budget, float) and self.budget > 1
        if self.budget is not None and (self.budget <= 0 or fraction_over_one):
            raise ValueError(f"budget must be bytes (int > 1) or a fraction in (0, 1], got {self.budget!r}")
        if self.warn > self.critical:
            raise ValueError(f"warn ({self.warn}) must not exceed critical ({self.critical})")
        return self


class PolicyConfig(_Strict):
    """Directives (issue 6): the zero-trust policy every planner's suggestion passes.

    Bounds are inclusive ``(min, max)`` pairs per directive field; the policy clamps into
    them (with a reason) and the trainer refuses anything outside them (defence in depth).
    Defaults follow the MEM v3 write-up: a planner may lower the learning rate, not raise it.
    """

    approval: Literal["manual", "auto"] = "manual"
    """manual: what the policy allows waits for an operator; auto: it is applied at once."""
    planner: Literal["rules", "none", "command", "openai"] = "none"
    """The built-in rule planner reading telemetry ("rules"), none (operator proposals only),
    a user command speaking JSON lines ("command"), or an OpenAI-compatible endpoint ("openai")."""
    planner_command: list[str] | None = None
    """planner = "command": its argv, started once and fed one telemetry summary per tick."""
    planner_url: str | None = Field(None, pattern=r"^https?://[^\s]+$", max_length=2048)
    """planner = "openai": base URL of the chat-completions API, e.g. http://127.0.0.1:8000/v1."""
    planner_model: str | None = Field(None, min_length=1, max_length=200)
    """planner = "openai": the model name sent with each request."""
    planner_api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """planner = "openai": the environment variable holding the API key (never run.json)."""
    planner_timeout_s: float = Field(10.0, gt=0.0, le=600.0)
    """Seconds an external planner has to answer one tick; later is a refusal."""
    planner_every_steps: int = Field(50, ge=1, le=10**6)
    """An external planner is asked every this many optimizer steps."""
    lr_multiplier_min: float = Field(0.05, gt=0.0, le=10.0)
    """Smallest factor on the configured LR schedule (not compounding)."""
    lr_multiplier_max: float = Field(0.85, gt=0.0, le=10.0)
    """Largest factor on the configured LR schedule: below 1 means lower-only."""
    gradient_clip_norm_min: float = Field(0.05, gt=0.0, le=1e6)
    """Tightest global gradient-norm clip a directive may set."""
    gradient_clip_norm_max: float = Field(1.25, gt=0.0, le=1e6)
    """Loosest global gradient-norm clip a directive may set."""
    loss_scale_initial_power_min: int = Field(1, ge=0, le=40)
    """fp16: the loss scale a directive sets is at least 2**this."""
    loss_scale_initial_power_max: int = Field(10, ge=0, le=40)
    """fp16: ... and at most 2**this."""
    micro_batch_size_min: int = Field(1, ge=1, le=65536)
    """Samples per micro-batch; also within the memory controller's own bounds."""
    micro_batch_size_max: int = Field(65536, ge=1, le=65536)
    """Upper bound; the memory model must also predict the micro-batch fits."""
    ttl_s: float = Field(300.0, gt=0.0, le=86400.0)
    """Seconds a proposal lives before it expires (unless it names an earlier expiry)."""
    max_staleness_steps: int = Field(500, ge=0)
    """A proposal based on telemetry more than this many steps old is rejected as stale."""
    rate_limit: int = Field(6, ge=1, le=10_000)
    """Proposals per source per ``rate_window_s``; more are rejected as rate-limited."""
    rate_window_s: float = Field(60.0, gt=0.0, le=86400.0)
    """Sliding window of the rate limit, seconds."""
    max_pending: int = Field(32, ge=1, le=1000)
    """Directives waiting for an operator at once; more are rejected."""
    require_accelerator: bool = False
    """True: the run needs a GPU, so every directive is rejected while the doctor finds
    none (or has not reported yet). False: a CPU run's "degraded: no GPU" does not block."""

    @model_validator(mode="after")
    def _bounds_ordered(self) -> PolicyConfig:
        for name in ("lr_multiplier", "gradient_clip_norm", "loss_scale_initial_power", "micro_batch_size"):
            low, high = getattr(self, f"{name}_min"), getattr(self, f"{name}_max")
            if low > high:
                raise ValueError(f"{name}_min ({low}) must not exceed {name}_max ({high})")
        return self

    @model_validator(mode="after")
    def _planner_configured(self) -> PolicyConfig:
        if self.planner == "command" and not self.planner_command:
            raise ValueError('planner = "command" needs planner_command (an argv list)')
        if self.planner == "openai" and not (self.planner_url and self.planner_model):
            raise ValueError('planner = "openai" needs planner_url and planner_model')
        return self


class AlertConfig(_Strict):
    """Alerts (the Doctor issue): thresholds, hysteresis, throttling, hardware readings.

    The supervisor evaluates the rules on every step report and on a timer, records each
    alert as a durable ``alert`` event, and can run ``command`` with the alert as JSON.
    """

    no_step_s: float = Field(600.0, gt=0.0)
    """Seconds without a step while running before the heartbeat alert (a stuck run)."""
    memory_fraction: float = Field(0.92, gt=0.0, le=1.0)
    """Step peak / budget (or capacity) at which memory headroom is low."""
    throughput_drop: float = Field(0.5, gt=0.0, lt=1.0)
    """Fraction below its moving baseline that tokens/s must fall to alert."""
    throughput_baseline_steps: int = Field(50, ge=2)
    """Steps the tokens/s baseline averages over (and waits for before judging)."""
    throughput_sustain_steps: int = Field(5, ge=1)
    """Consecutive dropped steps before the alert (one slow step is no trend)."""
    loss_smoothing_steps: int = Field(20, ge=1)
    """Steps the loss is smoothed over before judging divergence."""
    loss_diverge_ratio: float = Field(2.0, gt=1.0)
    """Smoothed loss / its best so far at which the loss is diverging."""
    loss_scale_floor: float = Field(1.0, gt=0.0)
    """fp16 loss scale at or below which the scale is at its floor."""
    temperature_c: int = Field(85, ge=30, le=120)
    """GPU temperature alert (C); lowered to the GPU's slowdown threshold minus the margin."""
    temperature_margin_c: int = Field(5, ge=0)
    """Degrees below the GPU's own slowdown threshold at which to alert."""
    temperature_hysteresis_c: int = Field(5, ge=0)
    """Degrees below the alert temperature it must fall to clear."""
    disk_checkpoint_factor: float = Field(1.5, ge=1.0)
    """Free disk must exceed the newest checkpoint's size times this (room for the next)."""
    disk_min_free_mb: int = Field(1024, ge=0)
    """MiB that must stay free on the checkpoint disk beyond the next checkpoint."""
    hysteresis: float = Field(0.05, ge=0.0, lt=0.5)
    """Margin (a fraction) a value must come back by before an alert clears."""
    throttle_s: float = Field(300.0, ge=0.0)
    """Seconds after an alert during which the same rule stays quiet if it fires again."""
    repeat_s: float = Field(3600.0, gt=0.0)
    """A condition still firing is alerted again this often (seconds)."""
    hardware_interval_s: float = Field(10.0, gt=0.0)
    """Seconds between hardware readings (NVML, host), taken off the event loop."""
    doctor_interval_s: float = Field(1800.0, gt=0.0)
    """Seconds between full doctor reports (a ``doctor_report`` event); one at start."""
    command: str | None = None
    """Shell-style command run for each alert with the alert event as JSON on stdin (a
    webhook script); its failures are logged, never fatal."""
    command_timeout_s: float = Field(10.0, gt=0.0)
    """Seconds the command may run before it is killed."""


class RunConfig(_Strict):
    """Everything a run needs, validated once at the edge and stored as ``run.json``."""

    name: str = Field("demo", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    """Human name; the run id is ``<name>-<timestamp>``."""
    preset: PresetName = "tiny"
    """Starting point for ``model`` and ``train``; explicit keys override it."""
    steps: int = Field(2000, ge=1, le=10**9)
    """Target optimizer steps."""
    seed: int = Field(1234, ge=0, le=2**31 - 1)
    """Seeds model init and the data order: batch (step, micro) is a function of (seed, step)."""
    log_every: int = Field(1, ge=1)
    """Report telemetry every N optimizer steps (the store keeps every report)."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    restart: RestartConfig = Field(default_factory=RestartConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    alerts: AlertConfig = Field(default_factory=AlertConfig)
    """Alert thresholds, hardware reading intervals and the alert command (the Doctor issue)."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """Directives: bounds, approval mode and planner (issue 6)."""
    workload: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """Optional ``module:function`` that builds a user's model and data (see README)."""
    workload_dir: str | None = None
    """Directory put first on ``sys.path`` to import ``workload``; defaults to the directory
    of the config file, or where ``memtui run`` was started."""
    deepspeed_config: dict[str, Any] | None = None
    """A user's DeepSpeed JSON config: passed through, except keys memtui owns."""


PRESETS: dict[str, dict[str, Any]] = {
    # CPU demo: ~0.1M parameters, fast enough for >= 20 optimizer steps/s on 2 cores.
    "tiny": {
        "model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 128},
        "train": {"micro_batch": 8, "global_batch": 8, "lr": 3e-3, "min_lr": 3e-4},
    },
    # A few million parameters: a real GPU run or a patient CPU.
    "small": {
        "model": {"n_layer": 6, "n_head": 8, "d_model": 256, "seq_len": 256},
        "train": {"micro_batch": 16, "global_batch": 64, "lr": 1e-3, "min_lr": 1e-4},
    },
}

# Keys of a user's DeepSpeed config that memtui sets from RunConfig; a user's value for
# one of them would silently fight ours, so it is refused with the memtui key to use.
OWNED_DEEPSPEED_KEYS: dict[str, str] = {
    "train_batch_size": "train.global_batch",
    "train_micro_batch_size_per_gpu": "train.micro_batch",
    "gradient_accumulation_steps": "train.global_batch / train.micro_batch",
    "fp16.enabled": "train.precision",
    "bf16.enabled": "train.precision",
    "fp16.initial_scale_power": "train.initial_scale_power",
    "zero_optimization.stage": "train.zero_stage",
    "gradient_clipping": "train.grad_clip",
}


class ConfigError(ValueError):
    """A config that cannot run; the message names every offending key."""


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A new dict: ``over``'s values win; nested dicts merge key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(config)"
        if e["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key")
        else:
            lines.append(f"{where}: {e['msg']} (got {e.get('input')!r})")
    return "; ".join(lines)


def _check_deepspeed_keys(ds: dict[str, Any]) -> None:
    for dotted, ours in OWNED_DEEPSPEED_KEYS.items():
        node: Any = ds
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            raise ConfigError(f"deepspeed_config.{dotted}: set by memtui, use {ours} instead")


def build_run_config(raw: dict[str, Any] | None = None, **overrides: Any) -> RunConfig:
    """Validate ``raw`` (a parsed TOML document) on top of its preset.

    ``overrides`` are top-level keys from the command line (``steps``, ``name``, ``preset``),
    applied last; ``None`` values are ignored.
    """
    raw = dict(raw or {})
    raw.update({k: v for k, v in overrides.items() if v is not None})
    preset = raw.get("preset", "tiny")
    if preset not in PRESETS:
        raise ConfigError(f"preset: unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    if raw.get("workload") and not raw.get("workload_dir"):
        raw["workload_dir"] = os.getcwd()  # the trainer runs elsewhere: remember where we were
    merged = deep_merge(PRESETS[preset], raw)
    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None
    if config.deepspeed_config:
        _check_deepspeed_keys(config.deepspeed_config)
    return config


def load_run_config(
    path: Path | None = None, settings: list[str] | None = None, **overrides: Any
) -> RunConfig:
    """Read a TOML config (optional) plus command-line overrides into a RunConfig.

    A ``deepspeed_config = "file.json"`` string is read relative to the TOML file.
    ``settings``: ``--set KEY=VALUE`` texts (engine.config_override), applied over the file.
    """
    raw = _read_toml(path) if path is not None else {}
    for text in settings or []:
        try:
            raw = deep_merge(raw, parse_override(text))
        except OverrideError as err:
            raise ConfigError(str(err)) from None
    return build_run_config(raw, **overrides)


def _read_toml(path: Path) -> dict[str, Any]:
    """The file's table, with its relative paths resolved against the file's directory."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    here = Path(path).resolve().parent
    if raw.get("workload") and not raw.get("workload_dir"):
        raw["workload_dir"] = str(here)
    elif isinstance(raw.get("workload_dir"), str):
        raw["workload_dir"] = str(here / raw["workload_dir"])
    ds = raw.get("deepspeed_config")
    if isinstance(ds, str):
        raw["deepspeed_config"] = _read_json(Path(path).parent / ds)
    return raw


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"deepspeed_config: {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"deepspeed_config: {path}: not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"deepspeed_config: {path}: must hold a JSON object")
    return value


# ------------------------------------------------------------------------ telemetry


class RankMemory(BaseModel):
    """One rank's memory as it reported it through the ranks' collective (every few steps).

    Bytes; on the CPU the same stand-ins as the sample's own ``mem_*`` (see MemoryKind)."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=0)
    allocated: int = Field(ge=0)
    reserved: int = Field(ge=0)
    peak: int = Field(ge=0)
    """Peak since the rank's previous report (CUDA: max_memory_allocated; CPU: RSS high-water)."""
    capacity: int = Field(ge=0)


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
    mem_allocated: int = Field(0, ge=0)
    mem_reserved: int = Field(0, ge=0)
    mem_peak: int = Field(0, ge=0)
    mem_capacity: int = Field(0, ge=0)
    mem_kind: MemoryKind = "cpu-rss"
    """What the memory numbers measure; see MemoryKind."""
    mem_step_peak: int | None = Field(None, ge=0)
    """Peak of this step alone (CUDA: max_memory_allocated since the step began; CPU: the
    largest RSS seen after a forward); what the predictive model is calibrated against."""
    mem_predicted: int | None = Field(None, ge=0)
    """The memory model's predicted peak for this step's micro-batch."""
    mem_budget: int | None = Field(None, ge=0)
    """The budget the memory controller steers by (memory.budget resolved to bytes)."""
    checkpoint_stall_s: float | None = Field(None, ge=0.0)
    """Seconds training stood still for the checkpoint saved just before this step's report
    (saving is synchronous); None when no save came in between."""
    micro_batch: int = Field(ge=1)
    grad_accum: int = Field(ge=1)
    world_size: int = Field(1, ge=1)
    ranks: list[RankMemory] | None = None
    """Every rank's memory, rank order; only on the samples of steps where the ranks
    exchanged it (every ``train.rank_report_every`` steps) and only when world_size > 1."""


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
    """One verdict on one directive, as the store's ``decisions`` table keeps it (issue 6).

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
    verdict: Literal["allow", "clamp", "reject"]
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
    loss_scale: float | None = None
    mem_allocated: int | None = None
    mem_reserved: int | None = None
    mem_peak: int | None = None
    mem_capacity: int | None = None
    mem_kind: MemoryKind | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    world_size: int | None = None
    restarts: int = 0
    attempt: int = 0
    started_at: float | None = None
    updated_at: float | None = None
    """ts of the newest step sample."""
    supervisor_pid: int | None = None
    trainer_pid: int | None = None
    exit_reason: str | None = None
    """How the run ended, in words, once it has."""
    ranks: list[RankMemory] | None = None
    """Several ranks: every rank's memory from the newest rank report (``ranks_step``)."""
    ranks_step: int | None = None
    last_seq: int = 0
