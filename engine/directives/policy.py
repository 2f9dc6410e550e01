"""The zero-trust policy every directive passes before it may reach the optimizer.

``LocalPolicyEngine.evaluate`` is pure and deterministic given the directive, the context
(the trainer's latest telemetry, its health, the clock) and its own rate-limit history:
the same inputs give the same verdict, decision id included. Its verdict is an audit
record like an admission controller's: allow / clamp / reject, a reason per finding, the
patch that would be applied, the bounds it was judged by and the policy's revision.

What it rejects outright: an expired or stale directive, a source over its rate limit, a
micro-batch the memory model predicts will not fit (or one at or above a size that ran out
of memory within ``memory.retry_after_steps``), a loss-scale power without fp16, an
empty directive, and, while the environment or the numerics are unhealthy (the loss scale
at its floor, problems another check reported: a NaN loss, the doctor), any directive that
adds risk (``engine.directives.risk``): a remedy (a lower learning rate, a tighter clip, a
lower loss-scale power, a smaller micro-batch) is let through, with the health problem
and the change named in its reasons. Values outside the bounds are clamped into them,
each with a reason, except an operator's return of a field to its run default. An
operator's approval or clamp is judged again (``recheck``): allowed or rejected, never moved.
Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.config.directive_defaults import run_defaults
from engine.config.run_config import RunConfig
from engine.directives.directive import OPERATOR_SOURCE, Directive
from engine.directives.failed_sizes import growth_refusal
from engine.directives.risk import added_risk, remedy_note
from engine.directives.rollback_check import RollbackLimits, rollback_refusal, rollback_summary
from engine.domain import Bounds, Decision, DirectiveField, DirectiveValue, TelemetrySample, Verdict
from engine.memory.controller import Policy as MemoryPolicy
from engine.memory.controller import review_request


@dataclass(frozen=True)
class MemoryFigures:
    """The trainer's latest memory numbers (bytes per rank), from its telemetry."""

    micro_batch: int
    predicted_peak: int
    """The memory model's predicted peak at ``micro_batch``."""
    budget: int
    world_size: int = 1
    baseline: int = 0
    """Bytes no micro-batch changes (the trainer's measured baseline; 0 when unknown)."""

    @classmethod
    def of(cls, sample: TelemetrySample) -> MemoryFigures | None:
        """The figures of a telemetry sample; None without a prediction and a budget."""
        if not (sample.mem_predicted and sample.mem_budget):
            return None
        baseline = sample.mem_baseline or 0
        if not 0 <= baseline < min(sample.mem_predicted, sample.mem_budget):
            baseline = 0  # a baseline over the prediction cannot be split off: scale it all
        return cls(sample.micro_batch, sample.mem_predicted, sample.mem_budget, sample.world_size, baseline)

    def predict(self, micro_batch: int) -> int:
        """Peak at another micro-batch: the baseline, plus the rest scaled in proportion to
        the micro-batch (an upper bound when growing: with no baseline known, model states
        that do not grow are scaled too)."""
        varying = self.predicted_peak - self.baseline
        return self.baseline + math.ceil(varying * micro_batch / max(1, self.micro_batch))


@dataclass(frozen=True)
class PolicyContext:
    """What the policy judges a directive against."""

    now: float
    """Unix time, s."""
    step: int = 0
    """The trainer's newest reported optimizer step."""
    precision: str = "fp16"
    loss_scale: float | None = None
    """The newest fp16 loss scale; None without fp16 or before any telemetry (its floor is
    the run's ``alerts.loss_scale_floor``)."""
    memory: MemoryFigures | None = None
    problems: tuple[str, ...] = ()
    """Health problems reported elsewhere (the doctor, a missing accelerator, throttling)."""
    blockers: tuple[str, ...] = ()
    """Problems under which nothing passes, remedies included (the GPU the run requires is gone)."""
    current: Mapping[DirectiveField, DirectiveValue] = field(default_factory=dict)
    """Each field's value in effect now; a field missing here counts as unknown (risky)."""
    ooms: Mapping[int, int] = field(default_factory=dict)
    """Micro-batch -> the optimizer step of its newest OOM (``engine.directives.failed_sizes``)."""
    checkpoints: Mapping[str, int] = field(default_factory=dict)
    """The run's checkpoints that verify now: tag -> step (what a rollback may go back to)."""
    rolled_back_to: tuple[int, ...] = ()
    """The tag steps earlier rollbacks resumed from, oldest first."""


RATE_WINDOW_S = 60.0
"""The rate limit's sliding window: ``policy.rate_limit`` proposals per source per minute."""


@dataclass
class RateLimiter:
    """At most ``limit`` proposals per source in any ``window_s`` seconds (sliding window)."""

    limit: int
    window_s: float
    _seen: dict[str, deque[float]] = field(default_factory=dict)

    max_sources: int = 1024  # distinct sources remembered; a flood of names cannot grow us

    def admit(self, source: str, now: float) -> bool:
        if source not in self._seen and len(self._seen) >= self.max_sources:
            self._forget_idle(now)
            if len(self._seen) >= self.max_sources:
                return False  # too many live sources at once: refuse the newcomer
        times = self._seen.setdefault(source, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True

    def _forget_idle(self, now: float) -> None:
        for source in [s for s, t in self._seen.items() if not t or t[-1] <= now - self.window_s]:
            del self._seen[source]


def policy_revision(config: RunConfig) -> str:
    """12 hex digits identifying the policy, the memory bounds and the loss-scale floor it judges by."""
    judged = {
        "policy": config.policy.model_dump(mode="json"),
        "memory": config.memory.model_dump(mode="json"),
        "loss_scale_floor": config.alerts.loss_scale_floor,
    }
    return hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()[:12]


def clamp_value(
    name: DirectiveField, value: DirectiveValue, bounds: Bounds
) -> tuple[DirectiveValue, str | None]:
    """``value`` within the field's bounds, and a reason when it had to move."""
    low, high = bounds[name]
    if value < low:
        return low, f"{name} {value:g} raised to the policy minimum {low:g}"
    if value > high:
        return high, f"{name} {value:g} lowered to the policy maximum {high:g}"
    return value, None


class LocalPolicyEngine:
    """Judges directives for one run. Keeps only the rate limiter's history between calls."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.bounds: Bounds = config.policy.bounds()
        self.defaults = run_defaults(config)
        self.revision = policy_revision(config)
        self.limiter = RateLimiter(config.policy.rate_limit, RATE_WINDOW_S)
        self._decisions = 0

    def evaluate(self, directive: Directive, context: PolicyContext) -> Verdict:
        """A planner's (or an operator's) proposal: counts toward its source's rate limit."""
        if not self.limiter.admit(directive.source, context.now):
            limit = self.config.policy.rate_limit
            why = f"rate limit: {directive.source!r} over {limit} in {RATE_WINDOW_S:g} s"
            return self._verdict(directive, "reject", [why], {}, rate_limited=True)
        refused = self._refusal(directive, directive.values(), context)
        if refused is not None:
            return self._reject(directive, refused)
        if directive.rollback is not None:
            return self._rollback_verdict(directive, context)
        patch: dict[DirectiveField, DirectiveValue] = {}
        reasons: list[str] = []
        for name, value in directive.values().items():
            if directive.source == OPERATOR_SOURCE and self._is_default(name, value):
                patch[name] = value  # the way back to the configured state: see _is_default
                reasons.append(self._default_note(name, value))
                continue
            patch[name], moved = clamp_value(name, value, self.bounds)
            if moved is not None:
                reasons.append(moved)
        refused = self._memory_refusal(patch, context) or self._health_refusal(patch, context)
        if refused is not None:
            return self._reject(directive, refused)
        decision: Decision = "clamp" if patch != directive.values() else "allow"
        return self._verdict(directive, decision, self._health_notes(patch, context) + reasons, patch)

    def recheck(
        self, directive: Directive, values: dict[DirectiveField, DirectiveValue], context: PolicyContext
    ) -> Verdict:
        """The values an operator approves (as allowed) or sets (a clamp), judged again now:
        the policy allows them or rejects them, never moves them. Outside the bounds is a
        rejection naming the field (an operator's explicit number is not silently moved),
        unless it is the field's run default (see ``_is_default``)."""
        refused = self._refusal(directive, values, context)
        if refused is None and directive.rollback is not None:
            return self._rollback_verdict(directive, context)
        notes: list[str] = []
        for name, value in values.items():
            if self._is_default(name, value) and clamp_value(name, value, self.bounds)[1] is not None:
                notes.append(self._default_note(name, value))
            elif refused is None and clamp_value(name, value, self.bounds)[1] is not None:
                low, high = self.bounds[name]
                refused = f"{name} {value:g} is outside the policy bounds [{low:g}, {high:g}]"
        refused = refused or self._memory_refusal(values, context) or self._health_refusal(values, context)
        if refused is not None:
            return self._reject(directive, refused)
        return self._verdict(directive, "allow", self._health_notes(values, context) + notes, dict(values))

    def _is_default(self, name: DirectiveField, value: DirectiveValue) -> bool:
        """True when ``value`` is the field's run default. An operator may return a field to
        it in one directive even beyond the bounds (the trainer's hard limits take it in):
        it is the state the run was configured with and started in, a known state and not
        a new value, so a lower-only bound must not make undoing a cut take many steps.
        Every other check (expiry, health, memory) still applies."""
        return self.defaults.get(name) == value

    def _default_note(self, name: DirectiveField, value: DirectiveValue) -> str:
        low, high = self.bounds[name]
        return f"{name} {value:g} is the run's default: allowed outside the bounds [{low:g}, {high:g}]"

    # ----------------------------------------------------------------- findings

    def stale_reason(self, directive: Directive, step: int) -> str | None:
        """Why ``directive`` is stale at ``step`` (based on telemetry over
        ``policy.max_staleness_steps`` steps old), or None."""
        behind = step - directive.step
        if behind > self.config.policy.max_staleness_steps:
            return f"stale: based on step {directive.step}, {behind} steps behind step {step}"
        return None

    def _refusal(
        self, directive: Directive, values: dict[DirectiveField, DirectiveValue], context: PolicyContext
    ) -> str | None:
        """The first reason to reject outright, or None."""
        if context.now >= directive.expires_at:
            return f"expired {context.now - directive.expires_at:.0f} s ago"
        stale = self.stale_reason(directive, context.step)
        if stale is not None:
            return stale
        if directive.rollback is not None and values:
            return f"rollback: a rollback changes nothing else (it also asks for {', '.join(values)})"
        if not values and directive.rollback is None:
            return "nothing to change: no directive field was given"
        if context.blockers:
            return "environment unhealthy: " + "; ".join(context.blockers)
        if "loss_scale_initial_power" in values and context.precision != "fp16":
            return f"loss_scale_initial_power: {context.precision} has no loss scale"
        return None

    def _unhealthy(self, context: PolicyContext) -> str | None:
        """What is wrong with the environment or the numerics now, or None."""
        if context.problems:
            return "environment unhealthy: " + "; ".join(context.problems)
        if context.loss_scale is not None and context.loss_scale <= self.config.alerts.loss_scale_floor:
            return f"environment unhealthy: loss scale at its floor ({context.loss_scale:g})"
        return None

    def _health_refusal(
        self, values: dict[DirectiveField, DirectiveValue], context: PolicyContext
    ) -> str | None:
        """While unhealthy: a rejection naming each field that adds risk (remedies pass)."""
        unhealthy = self._unhealthy(context)
        risky = added_risk(values, context.current) if unhealthy else []
        return f"{unhealthy}; " + "; ".join(risky) if risky else None

    def _health_notes(
        self, values: dict[DirectiveField, DirectiveValue], context: PolicyContext
    ) -> list[str]:
        """While unhealthy, why an admitted directive was let through anyway."""
        unhealthy = self._unhealthy(context)
        if unhealthy is None:
            return []
        return [f"{unhealthy}; let through as a remedy: {remedy_note(values, context.current)}"]

    def _memory_refusal(
        self, values: dict[DirectiveField, DirectiveValue], context: PolicyContext
    ) -> str | None:
        micro_batch = values.get("micro_batch_size")
        if micro_batch is None:
            return None
        grown = growth_refusal(  # the run's own OOMs first: they need no memory figures
            int(micro_batch),
            _whole(context.current.get("micro_batch_size")),
            context.ooms,
            context.step,
            self.config.memory.retry_after_steps,
        )
        if grown is not None:
            return grown
        figures = context.memory
        if figures is None:
            return "micro_batch_size: no memory figures from the trainer yet to judge it by"
        memory = MemoryPolicy.from_config(self.config.memory, self.config.train, figures.world_size)
        verdict = review_request(
            int(micro_batch), figures.predict(int(micro_batch)), figures.budget, memory, figures.baseline
        )
        return None if verdict.accepted else f"micro_batch_size: {verdict.reason}"

    def _rollback_verdict(self, directive: Directive, context: PolicyContext) -> Verdict:
        """A rollback passes whole or not at all: nothing to clamp."""
        rollback = directive.rollback
        assert rollback is not None
        limits = RollbackLimits.of(self.config.policy)
        refused = rollback_refusal(
            rollback, context.step, context.checkpoints, context.rolled_back_to, limits
        )
        if refused is not None:
            return self._reject(directive, refused)
        return self._verdict(directive, "allow", [rollback_summary(rollback, context.step)], {})

    # ----------------------------------------------------------------- verdicts

    def _reject(self, directive: Directive, reason: str) -> Verdict:
        return self._verdict(directive, "reject", [reason], {})

    def _verdict(
        self,
        directive: Directive,
        decision: Decision,
        reasons: list[str],
        patch: dict[DirectiveField, DirectiveValue],
        rate_limited: bool = False,
    ) -> Verdict:
        self._decisions += 1
        return Verdict(
            decision=decision,
            decision_id=f"{self.revision[:6]}-{self._decisions}",
            policy_revision=self.revision,
            directive_id=directive.id,
            reasons=reasons,
            patch=patch,
            bounds=dict(self.bounds),
            rate_limited=rate_limited,
        )


def _whole(value: DirectiveValue | None) -> int | None:
    return None if value is None else int(value)
