"""The lr directive's factor on schedulers memtui does not own (torch only, no DeepSpeed):
the lr the optimizer sees is the scheduler's own times the factor, step after step, for
closed-form and chainable schedulers alike, and a changed factor replaces the old one."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, ExponentialLR, LambdaLR, MultiplicativeLR, StepLR

from engine.config.config_file import build_run_config
from engine.events import Payload
from engine.trainer.directive_applier import DirectiveApplier
from engine.wire.protocol import ApplyDirective

LR = 1e-2
SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "exponential": lambda o: ExponentialLR(o, 0.9),
    "multiplicative": lambda o: MultiplicativeLR(o, lambda _epoch: 0.95),  # has lr_lambdas, chains
    "step": lambda o: StepLR(o, step_size=3, gamma=0.5),
    "cosine_eta_min": lambda o: CosineAnnealingLR(o, T_max=10, eta_min=1e-3),  # affine, chainable
    "lambda": lambda o: LambdaLR(o, lambda step: 1.0 / (step + 1)),
}


class Link:
    directives: Any = None

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def event(self, payload: Payload, message: str = "", severity: str | None = None) -> None:
        self.events.append(payload.data())


def engine_with(build: Callable[[torch.optim.Optimizer], Any]) -> SimpleNamespace:
    """What the applier touches of a DeepSpeed engine: optimizer, lr_scheduler, fp16."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=LR)
    return SimpleNamespace(optimizer=optimizer, lr_scheduler=build(optimizer), fp16_enabled=lambda: False)


def own_lrs(build: Callable[[torch.optim.Optimizer], Any], steps: int) -> list[float]:
    """The scheduler alone: the lr before each of ``steps`` optimizer steps."""
    engine = engine_with(build)
    lrs = []
    for _ in range(steps):
        lrs.append(engine.optimizer.param_groups[0]["lr"])
        engine.optimizer.step()
        engine.lr_scheduler.step()
    return lrs


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_factor_on_the_schedulers_own_lr_never_compounds(name: str) -> None:
    build = SCHEDULERS[name]
    expected = own_lrs(build, 12)
    engine = engine_with(build)
    applier = DirectiveApplier(build_run_config({}), engine, None, Link())
    factors = {3: 0.5, 8: 0.25}  # set at step 3, replaced at step 8
    factor, seen = 1.0, []
    for step in range(12):
        if step in factors:
            factor = factors[step]
            applier.inbox.append(ApplyDirective(directive_id=f"d{step}", values={"lr_multiplier": factor}))
        applier.at_boundary(step)
        seen.append(engine.optimizer.param_groups[0]["lr"])  # what the loop reports as lr
        engine.optimizer.step()
        engine.lr_scheduler.step()  # as DeepSpeed does after each applied step
        expected[step] *= factor
    assert seen == pytest.approx(expected, rel=1e-9)
