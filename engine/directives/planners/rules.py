"""The built-in rule planner: telemetry in, suggested directive values out.

It only suggests: everything it says goes through the policy (and, in manual mode, an
operator) like any other planner. But it suggests only what could be allowed: each value
lies within the run's policy bounds, a micro-batch divides the global batch per rank (the
memory controller's own list, ``engine.memory.controller.Policy.micro_batches``) and is
predicted to fit, a value always moves away from the one in effect, and a value once
rejected (by the policy or an operator, ``refuse``) is never suggested again. Each rule has
a cool-down in optimizer steps, so a lasting condition yields one suggestion per
cool-down, and each suggestion carries its evidence: the telemetry it read.

Rules:
- loss spike with a checkpoint to go back to (a robust z-score over the window,
  ``engine.directives.spike_score``) -> a rollback to the newest verified tag before the
  spike, skipping the data through it (the LR and gradient rules below, which the same
  spike trips, then stay quiet for that step: the rollback is the one answer);
- loss spike or divergence (loss over ``SPIKE_FACTOR`` x its recent mean, or not finite)
  -> half the LR multiplier in effect;
- loss plateau (the best line through the last ``PLATEAU_STEPS`` losses gains under
  ``PLATEAU_GAIN`` of their mean, times the LR multiplier in effect: a lowered LR is
  expected to gain less) -> ``PLATEAU_FACTOR`` x the LR multiplier in effect, never below
  ``PLATEAU_FLOOR`` (on a 5,000-step ``tiny`` run, 0.7x per slow-down down to the policy's
  0.05 ended at a mean loss of 1.52 against 1.37 without the planner);
- repeated fp16 overflows (``OVERFLOWS`` within the window) -> a loss-scale power below
  the scale now in use;
- gradient-norm explosion (over ``GRAD_FACTOR`` x its recent median) -> a tighter clip;
- the held-out loss rising over the last evals while the train loss falls
  (``engine.directives.eval_trend``) is no rule of its own: it is cited in the evidence
  of a learning-rate suggestion (spike, plateau) made meanwhile;
- steady memory headroom (peak under ``HEADROOM`` of the usable room, the budget less the
  trainer's measured baseline, for the whole window)
  -> the next larger micro-batch the global batch allows, never one at or above a size that
  ran out of memory within ``memory.retry_after_steps`` (``failed_sizes``).
Pure and torch-free.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.config.run_config import RunConfig
from engine.directives.eval_trend import EvalTrend
from engine.directives.failed_sizes import growth_refusal
from engine.directives.policy import MemoryFigures
from engine.directives.slope import slope
from engine.directives.spike_score import robust_z, rollback_for, spike_evidence
from engine.domain import DirectiveField, DirectiveValue, TelemetrySample
from engine.memory.controller import Policy as MemoryPolicy
from engine.memory.controller import review_request
from engine.rollback import Rollback

WINDOW = 50  # steps of history the spike, overflow, gradient and headroom rules look at
SPIKE_FACTOR = 3.0  # loss over this x its window mean is a spike
OVERFLOWS = 3  # overflows within the window that count as repeated
GRAD_FACTOR = 10.0  # grad norm over this x its window median is an explosion
HEADROOM = 0.5  # measured peak under this fraction of the usable room is headroom
COOLDOWN_STEPS = 100  # steps between two suggestions of the same rule
PLATEAU_STEPS = 200  # losses (one a step) the plateau rule fits a line through
PLATEAU_GAIN = 0.03  # gained over PLATEAU_STEPS, as a fraction of their mean; below: a plateau
PLATEAU_FACTOR = 0.7  # on the LR multiplier in effect when the loss plateaus
PLATEAU_COOLDOWN_STEPS = 500  # a lower LR needs time to show; judge a fresh window
PLATEAU_FLOOR = 0.5  # lowest LR multiplier a plateau suggests: a slowing loss is no emergency


@dataclass(frozen=True)
class Suggestion:
    """Directive values, why, and the telemetry read (one short line per figure)."""

    values: dict[DirectiveField, DirectiveValue]
    rationale: str
    evidence: list[str] = field(default_factory=list)
    rollback: Rollback | None = None
    """A rollback instead of values (then ``values`` is empty)."""


class RulePlanner:
    """Reads one TelemetrySample at a time; ``observe`` returns its suggestions for it."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.bounds = config.policy.bounds()
        self.losses: deque[float] = deque(maxlen=PLATEAU_STEPS)
        self.grad_norms: deque[float] = deque(maxlen=WINDOW)
        self.overflows: deque[bool] = deque(maxlen=WINDOW)
        self.headroom: deque[bool] = deque(maxlen=WINDOW)
        self.last_fired: dict[str, int] = {}
        self.refused: dict[str, set[DirectiveValue]] = {}
        """Field -> values rejected once; never suggested again."""
        self.ooms: dict[int, int] = {}
        """Micro-batch -> the optimizer step of its newest OOM (as ``observe`` was told)."""
        self.eval_trend = EvalTrend()
        """The newest evals beside the train loss of their moment (``observe_eval``)."""
        self._last_step = -1

    def observe(
        self,
        sample: TelemetrySample,
        effective: dict[str, Any],
        ooms: Mapping[int, int] | None = None,
        checkpoints: Mapping[str, int] | None = None,
    ) -> list[Suggestion]:
        """Suggestions for this step, given the directive values already in effect, the
        micro-batches that ran out of memory (micro-batch -> the step of its newest OOM) and
        the checkpoints that verify (tag -> step)."""
        self.ooms = dict(ooms or {})
        if self.losses and sample.step < self._last_step:
            self.losses.clear()  # a rollback (or a restart) went back: judge the new branch afresh
        self._last_step = sample.step
        rollback = self._rollback(sample, checkpoints or {})
        rules = (self._loss_spike, self._plateau, self._overflows, self._grad_explosion, self._headroom)
        skipped = {self._loss_spike, self._grad_explosion} if rollback else set()
        out = [s for s in (rule(sample, effective) for rule in rules if rule not in skipped) if s is not None]
        self._remember(sample)
        return [rollback, *out] if rollback else out

    def observe_eval(self, step: int, loss: float) -> None:
        """An eval after ``step``: noted with the mean train loss of the last WINDOW steps."""
        recent = list(self.losses)[-WINDOW:]
        self.eval_trend.note(step, loss, statistics.fmean(recent) if recent else None)

    def _lr_evidence(self, evidence: list[str]) -> list[str]:
        """A learning-rate suggestion's evidence, with the eval trend when it shows one."""
        trend = self.eval_trend.evidence()
        return [*evidence, trend] if trend else evidence

    def refuse(self, values: dict[DirectiveField, DirectiveValue]) -> None:
        """These values were rejected: never suggest any of them again."""
        for name, value in values.items():
            self.refused.setdefault(name, set()).add(value)

    # ------------------------------------------------------------------- rules

    def _rollback(self, sample: TelemetrySample, checkpoints: Mapping[str, int]) -> Suggestion | None:
        if not math.isfinite(sample.loss) or not checkpoints:
            return None
        reading = robust_z(list(self.losses)[-WINDOW:], sample.loss)
        if reading is None or not reading.spike:
            return None
        rollback = rollback_for(sample.step, checkpoints, self.config.policy.rollback_horizon_steps)
        if rollback is None or not self._ready("rollback", sample.step, COOLDOWN_STEPS):
            return None
        why = f"loss spike at step {sample.step} (robust z {reading.z:.1f}): roll back to {rollback.tag}"
        return Suggestion({}, why, spike_evidence(reading, sample.step, rollback), rollback)

    def _loss_spike(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        recent = list(self.losses)[-WINDOW:]
        if len(recent) < 10:
            return None
        mean = statistics.fmean(recent)
        if math.isfinite(sample.loss) and sample.loss <= SPIKE_FACTOR * mean:
            return None
        current = float(effective.get("lr_multiplier", 1.0))
        value = self._lowered("lr_multiplier", current, round(current * 0.5, 6))
        if value is None or not self._ready("lr", sample.step, COOLDOWN_STEPS):
            return None
        evidence = [
            f"loss {sample.loss:.4g} at step {sample.step}",
            f"{len(recent)}-step mean loss {mean:.4g} (spike: over {SPIKE_FACTOR:g}x)",
            f"lr multiplier in effect {current:g}",
        ]
        why = f"loss {sample.loss:.4g} over {SPIKE_FACTOR:g}x its recent mean: lower the learning rate"
        return Suggestion({"lr_multiplier": value}, why, self._lr_evidence(evidence))

    def _plateau(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        if len(self.losses) < PLATEAU_STEPS or sample.step <= self.config.train.warmup_steps + PLATEAU_STEPS:
            return None
        per_step = slope(self.losses)
        mean = statistics.fmean(self.losses)
        if per_step is None or mean <= 0:
            return None
        gain = 0.0 - per_step * len(self.losses) / mean  # fraction of the mean lost over the window
        current = float(effective.get("lr_multiplier", 1.0))
        expected = PLATEAU_GAIN * min(1.0, current)  # a lower LR is expected to gain less
        if gain >= expected:
            return None
        target = max(PLATEAU_FLOOR, round(current * PLATEAU_FACTOR, 6))
        value = self._lowered("lr_multiplier", current, target)
        if value is None or not self._ready("plateau", sample.step, PLATEAU_COOLDOWN_STEPS):
            return None
        evidence = [
            f"loss slope {per_step:+.3g}/step over the last {len(self.losses)} steps",
            f"{gain:.1%} of the mean loss {mean:.4g} gained (plateau: under {expected:.1%})",
            f"lr {sample.lr:.3g} at multiplier {current:g}",
        ]
        why = f"loss plateaued over {len(self.losses)} steps: lower the learning rate to {value:g}x"
        return Suggestion({"lr_multiplier": value}, why, self._lr_evidence(evidence))

    def _overflows(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        count = sum(self.overflows) + int(sample.overflow)
        scale = sample.loss_scale
        if count < OVERFLOWS or scale is None or not math.isfinite(scale):
            return None
        current = int(math.log2(max(1.0, scale)))
        value = self._lowered("loss_scale_initial_power", current, current - 1)
        if value is None or not self._ready("scale", sample.step, COOLDOWN_STEPS):
            return None
        evidence = [
            f"{count} overflows in {len(self.overflows) + 1} steps",
            f"loss scale {scale:g} (2**{current}) at step {sample.step}",
        ]
        why = f"{count} fp16 overflows in {len(self.overflows) + 1} steps: restart the scale at 2**{value}"
        return Suggestion({"loss_scale_initial_power": value}, why, evidence)

    def _grad_explosion(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        norm = sample.grad_norm
        if norm is None or len(self.grad_norms) < 10:
            return None
        median = statistics.median(self.grad_norms)
        if math.isfinite(norm) and norm <= GRAD_FACTOR * max(median, 1e-12):
            return None
        configured = self.config.train.grad_clip or math.inf  # 0: no clipping, any clip is tighter
        current = float(effective.get("gradient_clip_norm", configured))
        target = self.bounds["gradient_clip_norm"][1] if math.isinf(current) else round(current * 0.5, 6)
        value = self._lowered("gradient_clip_norm", current, target)
        if value is None or not self._ready("clip", sample.step, COOLDOWN_STEPS):
            return None
        evidence = [f"gradient norm {norm:.4g} at step {sample.step}", f"median {median:.4g}"]
        why = f"gradient norm {norm:.4g} over {GRAD_FACTOR:g}x its median: tighten clipping to {value:g}"
        return Suggestion({"gradient_clip_norm": value}, why, evidence)

    def _headroom(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        if len(self.headroom) < WINDOW or not all(self.headroom):
            return None
        value = self._larger_micro_batch(sample)
        if value is None or not self._ready("micro_batch", sample.step, COOLDOWN_STEPS):
            return None
        evidence = [
            f"step peak under {HEADROOM:.0%} of the usable room for {WINDOW} steps",
            f"peak {sample.mem_step_peak} of {sample.mem_budget} bytes (baseline {sample.mem_baseline or 0}) "
            f"at micro-batch {sample.micro_batch}",
            f"global batch {self.config.train.global_batch} over {sample.world_size} rank(s)",
        ]
        why = f"steady memory headroom at micro-batch {sample.micro_batch}: try {value}"
        return Suggestion({"micro_batch_size": value}, why, evidence)

    # ---------------------------------------------------------------- helpers

    def _lowered(self, name: DirectiveField, current: float, target: DirectiveValue) -> DirectiveValue | None:
        """``target`` within the bounds, if that is still below ``current`` and never refused."""
        low, high = self.bounds[name]
        value = min(max(target, low), high)
        if value >= current or value in self.refused.get(name, ()):
            return None
        return value

    def _larger_micro_batch(self, sample: TelemetrySample) -> int | None:
        """The smallest micro-batch above the current one that the geometry, the bounds and
        the memory model allow, never refused."""
        memory = MemoryPolicy.from_config(self.config.memory, self.config.train, sample.world_size)
        low, high = self.bounds["micro_batch_size"]
        figures = MemoryFigures.of(sample)
        for size in memory.micro_batches():
            if size <= sample.micro_batch or not low <= size <= high:
                continue
            if size in self.refused.get("micro_batch_size", ()):
                continue
            retry_after = self.config.memory.retry_after_steps
            if growth_refusal(size, sample.micro_batch, self.ooms, sample.step, retry_after):
                return None  # it, or a smaller size, ran out of memory lately: no larger one either
            if (
                figures is None
                or not review_request(
                    size, figures.predict(size), figures.budget, memory, figures.baseline
                ).accepted
            ):
                return None  # no prediction, or the next size is predicted not to fit
            return size
        return None

    def _ready(self, rule: str, step: int, cooldown: int) -> bool:
        """True (and the cool-down starts) unless this rule fired within ``cooldown`` steps."""
        last = self.last_fired.get(rule)
        if last is not None and step - last < cooldown:
            return False
        self.last_fired[rule] = step
        return True

    def _remember(self, sample: TelemetrySample) -> None:
        if math.isfinite(sample.loss):
            self.losses.append(sample.loss)
        if sample.grad_norm is not None and math.isfinite(sample.grad_norm):
            self.grad_norms.append(sample.grad_norm)
        self.overflows.append(sample.overflow)
        peak, budget, base = sample.mem_step_peak, sample.mem_budget, sample.mem_baseline or 0
        self.headroom.append(
            bool(peak and budget and base < budget and peak - base < HEADROOM * (budget - base))
        )
