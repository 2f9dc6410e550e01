"""Injected out-of-memory errors for tests and rehearsals.

``MEMTUI_INJECT_OOM="STEP:MICRO:PHASE[:AT_LEAST][,...]"``: raise ``MemoryError`` in PHASE
(``forward`` or ``backward``) of micro-batch MICRO of optimizer step STEP (0-based), when
the micro-batch then is at least AT_LEAST samples (default 1), once per trainer process.
A forward error comes from a forward pre-hook on the model; a backward error from a
gradient hook on the model's first parameter, so part of the backward has already run.
``MEMTUI_INJECT_OOM_RANK=R`` fires them on rank R alone (several ranks).
A chaos request (``oom``) adds one for the next step's first micro-batch (``OomInjector.add``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import torch

INJECT_OOM_ENV = "MEMTUI_INJECT_OOM"
INJECT_OOM_RANK_ENV = "MEMTUI_INJECT_OOM_RANK"
Phase = Literal["forward", "backward"]


@dataclass
class Injection:
    step: int
    micro: int
    phase: Phase
    at_least: int = 1
    fired: bool = False


def parse_injections(text: str) -> list[Injection]:
    """'5:1:backward:4' -> [Injection(5, 1, 'backward', 4)]."""
    found = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        parts = item.split(":")
        if len(parts) not in (3, 4) or parts[2] not in ("forward", "backward"):
            raise ValueError(f"{INJECT_OOM_ENV}: {item!r} is not STEP:MICRO:forward|backward[:AT_LEAST]")
        at_least = int(parts[3]) if len(parts) == 4 else 1
        found.append(Injection(int(parts[0]), int(parts[1]), parts[2], at_least))  # type: ignore[arg-type]
    return found


class OomInjector:
    """Arms hooks on ``model``; ``position`` is told which micro-batch is running."""

    def __init__(self, injections: list[Injection]) -> None:
        self.injections = injections
        self.position: tuple[int, int, int] = (-1, -1, 0)  # (step, micro, micro_batch)
        self._attached = False

    @classmethod
    def from_env(cls, rank: int = 0) -> OomInjector:
        only = os.environ.get(INJECT_OOM_RANK_ENV, "").strip()
        if only and int(only) != rank:
            return cls([])
        return cls(parse_injections(os.environ.get(INJECT_OOM_ENV, "")))

    def attach(self, model: torch.nn.Module) -> None:
        if not self.injections or self._attached:
            return
        self._attached = True
        model.register_forward_pre_hook(lambda _module, _inputs: self._maybe_fire("forward"))
        first = next(p for p in model.parameters() if p.requires_grad)
        first.register_hook(self._on_grad)

    def add(self, injection: Injection, model: torch.nn.Module) -> None:
        """One more injection, its hooks put on ``model`` if none are yet. Without the
        start-time ones nothing tracks the micro-batch: the caller sets ``position``."""
        self.injections.append(injection)
        self.attach(model)

    def _on_grad(self, grad: torch.Tensor) -> torch.Tensor:
        self._maybe_fire("backward")
        return grad

    def _maybe_fire(self, phase: Phase) -> Any:
        step, micro, micro_batch = self.position
        for inj in self.injections:
            if (
                not inj.fired
                and inj.phase == phase
                and (inj.step, inj.micro) == (step, micro)
                and micro_batch >= inj.at_least
            ):
                inj.fired = True
                raise MemoryError(  # the step as telemetry numbers it (1-based), as every OOM message
                    f"injected OOM in {phase} of step {step + 1} micro-batch {micro} ({micro_batch} samples)"
                )
        return None
