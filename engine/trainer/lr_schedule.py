"""The learning-rate schedule: linear warm-up to the peak, then cosine decay to ``min_lr``.

Our own ``LambdaLR`` rather than DeepSpeed's ``WarmupCosineLR``: that one sets the lr to 0
for the first step (and warns "before it has started"), and a multiplier (an lr directive)
is simplest to apply through a function we own. A user's ``scheduler`` in their
deepspeed_config replaces this one (DeepSpeed builds it from the config).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from engine.domain import RunConfig


def lr_ratio(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Multiplier of the peak lr for 0-based optimizer step ``step``.

    Warm-up: (step + 1) / (warmup + 1), so step 0 already moves (nanoGPT's rule). Then a
    cosine from 1 to ``min_ratio`` reached at ``total_steps``, flat after it.
    """
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine(config: RunConfig) -> Callable[[Optimizer], LambdaLR]:
    """A factory DeepSpeed calls with its optimizer (``deepspeed.initialize(lr_scheduler=...)``)."""
    train = config.train
    min_ratio = train.min_lr / train.lr

    def ratio(step: int) -> float:
        return lr_ratio(step, train.warmup_steps, config.steps, min_ratio)

    def build(optimizer: Optimizer) -> LambdaLR:
        return LambdaLR(optimizer, ratio)

    return build
