"""The built-in rule planner: telemetry in, suggested directive values out.

It only suggests: everything it says goes through the policy (and, in manual mode, an
operator) like any other planner. Each rule has a rationale and a cool-down in optimizer
steps, so a lasting condition yields one suggestion per cool-down, not one per step.

Rules:
- loss spike or divergence (loss over ``SPIKE_FACTOR`` x its recent mean, or not finite)
  -> lower the LR multiplier by half of the one in effect;
- repeated fp16 overflows (``OVERFLOWS`` within the window) -> a loss-scale power one below
  the scale now in use;
- gradient-norm explosion (over ``GRAD_FACTOR`` x its recent median) -> a tighter clip;
- steady memory headroom (peak under ``HEADROOM`` of the budget for the whole window)
  -> double the micro-batch.
Torch-free.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

from engine.config import RunConfig
from engine.domain import TelemetrySample

WINDOW = 50  # steps of history each rule looks at
SPIKE_FACTOR = 3.0  # loss over this x its window mean is a spike
OVERFLOWS = 3  # overflows within the window that count as repeated
GRAD_FACTOR = 10.0  # grad norm over this x its window median is an explosion
HEADROOM = 0.5  # measured peak under this fraction of the budget is headroom
COOLDOWN_STEPS = 100  # steps between two suggestions of the same rule

Suggestion = tuple[dict[str, Any], str]  # (directive values, rationale)


class RulePlanner:
    """Reads one TelemetrySample at a time; ``observe`` returns its suggestions for it."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.losses: deque[float] = deque(maxlen=WINDOW)
        self.grad_norms: deque[float] = deque(maxlen=WINDOW)
        self.overflows: deque[bool] = deque(maxlen=WINDOW)
        self.headroom: deque[bool] = deque(maxlen=WINDOW)
        self.last_fired: dict[str, int] = {}

    def observe(self, sample: TelemetrySample, effective: dict[str, Any]) -> list[Suggestion]:
        """Suggestions for this step, given the directive values already in effect."""
        rules = (self._loss_spike, self._overflows, self._grad_explosion, self._headroom)
        out = [s for s in (rule(sample, effective) for rule in rules) if s is not None]
        self._remember(sample)
        return out

    # ------------------------------------------------------------------- rules

    def _loss_spike(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        if len(self.losses) < 10:
            return None
        mean = statistics.fmean(self.losses)
        spiked = not math.isfinite(sample.loss) or sample.loss > SPIKE_FACTOR * mean
        if not spiked or not self._ready("lr", sample.step):
            return None
        current = float(effective.get("lr_multiplier", 1.0))
        why = (
            f"loss {sample.loss:.4g} at step {sample.step} over {SPIKE_FACTOR:g}x "
            f"its {len(self.losses)}-step mean {mean:.4g}"
        )
        return {"lr_multiplier": round(current * 0.5, 6)}, f"{why}: halve the learning rate"

    def _overflows(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        count = sum(self.overflows) + int(sample.overflow)
        if count < OVERFLOWS or sample.loss_scale is None or not self._ready("scale", sample.step):
            return None
        power = max(0, int(math.log2(max(1.0, sample.loss_scale))) - 1)
        why = f"{count} fp16 overflows in {len(self.overflows) + 1} steps at loss scale {sample.loss_scale:g}"
        return {"loss_scale_initial_power": power}, f"{why}: restart the scale at 2**{power}"

    def _grad_explosion(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        norm = sample.grad_norm
        if norm is None or len(self.grad_norms) < 10:
            return None
        median = statistics.median(self.grad_norms)
        exploded = not math.isfinite(norm) or norm > GRAD_FACTOR * max(median, 1e-12)
        if not exploded or not self._ready("clip", sample.step):
            return None
        current = float(effective.get("gradient_clip_norm", self.config.train.grad_clip or 1.0))
        why = f"gradient norm {norm:.4g} over {GRAD_FACTOR:g}x its median {median:.4g}"
        return {"gradient_clip_norm": round(current * 0.5, 6)}, f"{why}: tighten clipping"

    def _headroom(self, sample: TelemetrySample, effective: dict[str, Any]) -> Suggestion | None:
        roomy = all(self.headroom) and len(self.headroom) == WINDOW
        if not roomy or not self._ready("micro_batch", sample.step):
            return None
        want = sample.micro_batch * 2
        why = (
            f"peak under {HEADROOM:.0%} of the budget for {WINDOW} steps at micro-batch {sample.micro_batch}"
        )
        return {"micro_batch_size": want}, f"{why}: try {want}"

    # ---------------------------------------------------------------- helpers

    def _ready(self, rule: str, step: int) -> bool:
        """True (and the cool-down starts) unless this rule fired within COOLDOWN_STEPS."""
        last = self.last_fired.get(rule)
        if last is not None and step - last < COOLDOWN_STEPS:
            return False
        self.last_fired[rule] = step
        return True

    def _remember(self, sample: TelemetrySample) -> None:
        if math.isfinite(sample.loss):
            self.losses.append(sample.loss)
        if sample.grad_norm is not None and math.isfinite(sample.grad_norm):
            self.grad_norms.append(sample.grad_norm)
        self.overflows.append(sample.overflow)
        peak, budget = sample.mem_step_peak, sample.mem_budget
        self.headroom.append(bool(peak and budget and peak < HEADROOM * budget))
