"""The operator's side of the run config: the zero-trust directive policy (bounds, approval,
planner, health gates) and the alerts (thresholds, hysteresis, hardware readings, the alert
command). Re-exported by ``engine.config.run_config``, where ``RunConfig`` holds them. Torch-free.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.domain import DIRECTIVE_FIELDS, DirectiveField, DirectiveValue


class StrictSection(BaseModel):
    """A config section that refuses unknown keys (a typo is an error naming the key)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    retired: ClassVar[dict[str, str]] = {}
    """Keys this section once had and reads no more, each with what stands in its place:
    dropped when a config file or an older run's ``run.json`` still names them, so both
    load (``docs/configuration.md`` lists them)."""

    @model_validator(mode="before")
    @classmethod
    def _drop_retired(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.retired and not cls.retired.keys().isdisjoint(data):
            data = {k: v for k, v in data.items() if k not in cls.retired}
        return data


class PolicyConfig(StrictSection):
    """Directives: the zero-trust policy every planner's suggestion passes.

    Bounds are inclusive ``(min, max)`` pairs per directive field; the policy clamps into
    them (with a reason) and the trainer refuses anything outside them (defence in depth).
    Defaults follow the MEM v3 write-up: a planner may lower the learning rate, not raise it.
    """

    retired: ClassVar[dict[str, str]] = {
        "rate_window_s": "a minute (engine.directives.policy.RATE_WINDOW_S)",
    }

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
    """A proposal based on telemetry more than this many steps old is rejected as stale, and
    a pending one expires once the run is that far past it."""
    rate_limit: int = Field(6, ge=1, le=10_000)
    """Proposals per source in any minute (a sliding window); more are rejected as
    rate-limited. Lower it for a planner that must not flood the queue."""
    max_pending: int = Field(32, ge=1, le=1000)
    """Directives waiting for an operator at once; more are rejected."""
    effect_steps: int = Field(100, ge=2, le=100_000)
    """An applied directive's effect compares this many optimizer steps after it with as
    many before (loss slope, tokens/s, overflows, peak memory)."""
    rollback_horizon_steps: int = Field(2000, ge=1, le=10**9)
    """A rollback's tag is at most this many optimizer steps behind the newest step (and
    skips at most as many steps of data)."""
    rollback_min_gap_steps: int = Field(100, ge=0, le=10**9)
    """Optimizer steps trained since the last rollback resumed before another is allowed."""
    rollback_max: int = Field(5, ge=0, le=10_000)
    """Rollbacks one supervisor performs at most (0: none)."""
    require_accelerator: bool | None = None
    """True: the run needs a GPU, so every directive (remedies included) is rejected while
    the doctor finds none (or has not reported yet). Unset: the same, once the doctor has
    found a GPU for this run (a GPU run whose device vanished), never on a CPU run.
    False: a missing GPU never blocks."""

    @model_validator(mode="after")
    def _bounds_ordered(self) -> PolicyConfig:
        for name, (low, high) in self.bounds().items():
            if low > high:
                raise ValueError(f"{name}_min ({low}) must not exceed {name}_max ({high})")
        return self

    def bounds(self) -> dict[DirectiveField, tuple[DirectiveValue, DirectiveValue]]:
        """Inclusive ``(low, high)`` per directive field: what the policy clamps into and the
        trainer refuses to go beyond."""
        return {
            name: (getattr(self, f"{name}_min"), getattr(self, f"{name}_max")) for name in DIRECTIVE_FIELDS
        }

    @model_validator(mode="after")
    def _planner_configured(self) -> PolicyConfig:
        if self.planner == "command" and not self.planner_command:
            raise ValueError('planner = "command" needs planner_command (an argv list)')
        if self.planner == "openai" and not (self.planner_url and self.planner_model):
            raise ValueError('planner = "openai" needs planner_url and planner_model')
        return self


class AlertConfig(StrictSection):
    """Alerts: thresholds, hysteresis, throttling, hardware readings.

    The supervisor evaluates the rules on every step report and on a timer, records each
    alert as a durable ``alert`` event, and can run ``command`` with the alert as JSON.
    """

    retired: ClassVar[dict[str, str]] = {
        "memory_fraction": "memory.warn and memory.critical (the usable room, as the controller judges it)",
        "throughput_sustain_steps": "5 steps (engine.alerts.rules.SUSTAIN_STEPS)",
        "loss_smoothing_steps": "20 steps (engine.alerts.rules.LOSS_SMOOTHING_STEPS)",
        "temperature_hysteresis_c": "5 C (engine.alerts.rules.TEMPERATURE_HYSTERESIS_C)",
        "disk_checkpoint_factor": "1.5 (engine.alerts.rules.NEXT_CHECKPOINT_FACTOR)",
        "fragmentation_steps": "20 steps (engine.alerts.fragmentation.FRAGMENTATION_STEPS)",
        "straggler_reports": "3 reports (engine.alerts.straggler.STRAGGLER_REPORTS)",
    }

    no_step_s: float = Field(600.0, gt=0.0)
    """Seconds without a step while running before the heartbeat alert (a stuck run)."""
    throughput_drop: float = Field(0.5, gt=0.0, lt=1.0)
    """Fraction below its moving baseline that tokens/s must fall to alert."""
    throughput_baseline_steps: int = Field(50, ge=2)
    """Steps the tokens/s baseline averages over (and waits for before judging); a new
    attempt (a restart) or batch geometry starts a new baseline."""
    data_wait_share: float = Field(0.3, gt=0.0, lt=1.0)
    """Share of a step spent waiting for its batches at which data starvation alerts (five
    reported steps in a row); the GPU idles for that share. Raise it for a workload known to
    stream from a slow source."""
    loss_diverge_ratio: float = Field(2.0, gt=1.0)
    """Smoothed loss / its best so far at which the loss is diverging."""
    loss_scale_floor: float = Field(1.0, gt=0.0)
    """fp16 loss scale at or below which the scale is at its floor."""
    fragmentation_share: float = Field(0.3, gt=0.0, lt=1.0)
    """CUDA: inactive split bytes / reserved bytes at which fragmentation alerts (memory the
    budget counts but no tensor can use; ``expandable_segments`` or a steadier micro-batch
    may help)."""
    temperature_c: int = Field(85, ge=30, le=120)
    """GPU temperature alert (C); lowered to the GPU's slowdown threshold minus the margin."""
    temperature_margin_c: int = Field(5, ge=0)
    """Degrees below the GPU's own slowdown threshold at which to alert."""
    disk_min_free_mb: int = Field(1024, ge=0)
    """MiB that must stay free on the checkpoint disk beyond the next checkpoint; on a disk
    too small for it, 5% of the disk's size (at least 16 MiB)."""
    straggler_slower: float = Field(0.25, gt=0.0, le=10.0)
    """Fraction above the ranks' median own step time at which a rank is slow (0.25: a
    quarter slower); judged on each rank report (``train.rank_report_every``)."""
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
