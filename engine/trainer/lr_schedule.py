"""The learning-rate schedule: linear warm-up to the peak, then cosine decay to ``min_lr``.

Our own ``LambdaLR`` rather than DeepSpeed's ``WarmupCosineLR``: that one sets the lr to 0
for the first step (and warns "before it has started"), and a multiplier (an lr directive)
is simplest to apply through a function we own. A user's ``scheduler`` in their
deepspeed_config, or a workload's ``lr_scheduler``, replaces this one; an lr directive then
reaches it through ``ScaledScheduler``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from engine.config.run_config import RunConfig


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


class ScaledScheduler:
    """A scheduler we do not own (a workload's, or the ``scheduler`` of a user's
    deepspeed_config) with an lr directive's factor on top, never compounding.

    Such a scheduler rewrites every param group's lr in ``step()``, and a chainable one
    (ExponentialLR, StepLR, ...) computes the next lr from the group's current one. So
    between steps the groups hold ``own lr x factor`` (what the optimizer uses and what
    ``engine.get_lr()`` reports), and ``step()`` puts the scheduler's own lr back first,
    lets it step, then multiplies the factor in again. It stands in for
    ``engine.lr_scheduler``: DeepSpeed steps it once per applied optimizer step and saves
    and loads ``state_dict()``, which pass through to the scheduler (the saved state holds
    no factor; a resume sets the factor again from the checkpoint's directive values).
    """

    def __init__(self, inner: Any, groups: list[dict[str, Any]]) -> None:
        self.inner = inner
        self.groups = groups
        self.factor = 1.0
        """The lr directive's multiplier (1 = the scheduler's own lr)."""
        self._carried = 1.0  # the factor the groups' lr holds now (for a scheduler we cannot ask)

    def set_factor(self, factor: float) -> None:
        """From now on the groups' lr is the scheduler's own times ``factor``."""
        self.factor = factor
        self._write(factor)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        self._write(1.0)  # a chainable scheduler must step from its own lr, not ours
        try:
            return self.inner.step(*args, **kwargs)
        finally:
            self._write(self.factor)

    def own_lrs(self) -> list[float]:
        """Each group's lr as the scheduler alone would have it now."""
        inner = self.inner
        if isinstance(inner, LRScheduler):
            return [float(lr) for lr in inner.get_last_lr()]  # restored by load_state_dict
        if callable(getattr(inner, "get_lr", None)):
            return [float(lr) for lr in inner.get_lr()]  # DeepSpeed's: closed form in the iteration
        return [group["lr"] / self._carried for group in self.groups]

    def _write(self, factor: float) -> None:
        for group, lr in zip(self.groups, self.own_lrs(), strict=True):
            group["lr"] = lr * factor
        self._carried = factor

    def __getattr__(self, name: str) -> Any:
        """state_dict, load_state_dict, get_last_lr, ...: the scheduler's own."""
        if name == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
