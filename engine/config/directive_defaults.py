"""Each directive field's run default: its value before any directive changed it.

The policy lets an operator return a field to its default in one directive even beyond the
bounds (``engine.directives.policy``): the default is a state the run was configured with
and started in, not a new value, so a lower-only bound (``lr_multiplier_max`` 0.85) does
not stand between an operator and undoing a cut. The trainer's defence in depth agrees: it
refuses what lies outside the bounds unless it is the default. Torch-free.
"""

from __future__ import annotations

from engine.config.run_config import RunConfig
from engine.domain import DIRECTIVE_FIELDS, DirectiveField, DirectiveValue


def run_defaults(config: RunConfig) -> dict[DirectiveField, DirectiveValue]:
    """Each field's configured value; a field with none a directive could set is left out
    (``train.grad_clip`` 0: no clipping, which no clip norm expresses)."""
    train = config.train
    out: dict[DirectiveField, DirectiveValue] = {
        "lr_multiplier": 1.0,  # the configured schedule itself
        "loss_scale_initial_power": train.initial_scale_power,
        "micro_batch_size": train.micro_batch,
    }
    if train.grad_clip > 0:
        out["gradient_clip_norm"] = train.grad_clip
    return {name: out[name] for name in DIRECTIVE_FIELDS if name in out}
