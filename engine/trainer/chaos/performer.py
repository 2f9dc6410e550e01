"""Who carries out a trainer chaos kind: one ``TrainerPerformer`` per kind (a module of
``engine.trainer.chaos.performers``), built once per training, holding what is in force.

A performer has three hook points, each a no-op unless it says otherwise:

    start(request, step, chaos_id)   at the boundary before ``step``: put it in force; what it
                                     does in this run, in words (``chaos_applied``'s detail)
    in_step(train_step, step)        the step as it runs inside the memory controller's step
                                     (``AdaptiveMemory.run_step``), so the controller sees
                                     its effect (an OOM, a slow step) as it sees a real one
    saving()                         around one checkpoint save
"""

from __future__ import annotations

import contextlib
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import torch

from engine.chaos.kind import ChaosKind
from engine.chaos.table import import_all
from engine.trainer.workloads.workload import BatchFn

R = TypeVar("R", bound=ChaosKind)
StepFn = Callable[[Any, BatchFn, int], torch.Tensor]
"""One optimizer step: ``(engine, batch, step) -> loss``."""


@dataclass(frozen=True)
class TrainerParts:
    """What a performer may use of the trainer."""

    engine: Any
    """DeepSpeed's engine."""
    memory: Any
    """The loop's AdaptiveMemory (its module, ballast, OOM injector, ranks)."""
    precision: str

    @property
    def fp16(self) -> bool:
        return self.precision == "fp16"


class TrainerPerformer(ABC, Generic[R]):
    """Carries out one kind (``model``, its request model); subclasses register by naming it."""

    model: ClassVar[type[ChaosKind]]
    registry: ClassVar[dict[str, type[TrainerPerformer[Any]]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model" in cls.__dict__:
            TrainerPerformer.registry[cls.model.name()] = cls

    def __init__(self, parts: TrainerParts) -> None:
        self.parts = parts

    @abstractmethod
    def start(self, request: R, step: int, chaos_id: str) -> str:
        """Take up ``request`` at the boundary before ``step``; the detail the chaos_applied
        event carries (what was done, or why nothing was)."""

    def in_step(self, train_step: StepFn, step: int) -> StepFn:
        return train_step

    def saving(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


@functools.cache
def performer_classes() -> dict[str, type[TrainerPerformer[Any]]]:
    """Kind -> its performer class: every module of ``performers`` imported."""
    import_all("engine.trainer.chaos.performers")
    return dict(TrainerPerformer.registry)


@contextlib.contextmanager
def nested(contexts: list[contextlib.AbstractContextManager[None]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield
