"""What the policy judges a directive against, built from the run's newest telemetry.

``judging_context`` gathers the clock, the newest step, its memory figures, the health
problems, the micro-batches that ran out of memory lately, the checkpoints a rollback may
go back to (and the earlier rollbacks) and the value of each directive
field in effect now (what a remedy must not go
above while the run is unhealthy). Pure and torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from engine.config.directive_defaults import run_defaults
from engine.config.run_config import RunConfig
from engine.directives.policy import MemoryFigures, PolicyContext
from engine.domain import DirectiveField, DirectiveValue, TelemetrySample


def values_in_effect(
    config: RunConfig, sample: TelemetrySample | None, effective: Mapping[DirectiveField, DirectiveValue]
) -> dict[DirectiveField, DirectiveValue]:
    """Each field's value now: the config's, then what directives set, then what the
    trainer last reported (its micro-batch, its live fp16 loss scale as a power of 2)."""
    out: dict[DirectiveField, DirectiveValue] = {
        "gradient_clip_norm": math.inf,  # train.grad_clip 0: no clipping, any clip is tighter
        **run_defaults(config),
    }
    out.update(effective)
    if sample is not None:
        out["micro_batch_size"] = sample.micro_batch
        scale = sample.loss_scale
        if scale is not None and math.isfinite(scale) and scale >= 1:
            out["loss_scale_initial_power"] = int(math.log2(scale))
    return out


def judging_context(
    config: RunConfig,
    sample: TelemetrySample | None,
    effective: Mapping[DirectiveField, DirectiveValue],
    problems: tuple[str, ...],
    now: float,
    blockers: tuple[str, ...] = (),
    ooms: Mapping[int, int] | None = None,
    checkpoints: Mapping[str, int] | None = None,
    rolled_back_to: tuple[int, ...] = (),
) -> PolicyContext:
    memory = MemoryFigures.of(sample) if sample is not None else None
    return PolicyContext(
        now=now,
        step=sample.step if sample else 0,
        precision=config.train.precision,
        loss_scale=sample.loss_scale if sample else None,
        memory=memory,
        problems=problems,
        blockers=blockers,
        current=values_in_effect(config, sample, effective),
        ooms=dict(ooms or {}),
        checkpoints=dict(checkpoints or {}),
        rolled_back_to=rolled_back_to,
    )
