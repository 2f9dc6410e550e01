"""The trainer's active chaos injections: what the supervisor asked for, in force step by step.

The supervisor sends ``InjectChaos`` (a trainer kind of ``engine.chaos.table``); the link
queues it and the loop consults one ``ChaosInjections`` at fixed points::

    chaos.at_boundary(step)                 queued requests take effect (one ``chaos_applied``
                                            each), through their kind's performer
    memory.run_step(..., hook=chaos.hook)   inside the controlled step: each performer's
                                            ``in_step`` (a slow step sleeps, a NaN loss or an
                                            overflow poisons or skips it, a spike multiplies it)
    with chaos.saving(): save               e.g. the next K saves fail as on a full disk

Each kind's performer (``engine.trainer.chaos.performers``) goes through the code its
start-time environment variable uses; this module names no kind.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from typing import Any

from engine.events import ChaosApplied
from engine.trainer.chaos.performer import StepFn, TrainerParts, TrainerPerformer, nested, performer_classes
from engine.wire.protocol import InjectChaos

log = logging.getLogger(__name__)


class ChaosInjections:
    """The injections in force; ``memory`` is the loop's AdaptiveMemory (ballast, OOM hooks)."""

    def __init__(self, engine: Any, memory: Any, link: Any, precision: str) -> None:
        self.engine = engine
        self.link = link
        inbox = getattr(link, "chaos", None)  # an empty deque is falsy: test for None
        self.inbox: deque[InjectChaos] = inbox if inbox is not None else deque()
        parts = TrainerParts(engine, memory, precision)
        self.performers: dict[str, TrainerPerformer[Any]] = {
            kind: performer(parts) for kind, performer in performer_classes().items()
        }
        """Kind -> its performer, with what it holds in force."""

    def at_boundary(self, step: int) -> None:
        """Before step ``step`` (0-based): queued requests take effect from this step on."""
        while self.inbox:
            message = self.inbox.popleft()
            kind = message.request.kind
            performer = self.performers.get(kind)
            if performer is None:
                log.warning("chaos %s (%s) is not the trainer's to perform: ignored", kind, message.chaos_id)
                continue
            detail = performer.start(message.request, step, message.chaos_id)
            applied = ChaosApplied(chaos_id=message.chaos_id, kind=kind, step=step, detail=detail)
            said = f"chaos {kind} ({message.chaos_id}) from step {applied.first_step}: {detail}"
            self.link.event(applied, said)

    def hook(self, train_step: StepFn, step: int) -> StepFn:
        """The step hook the memory controller runs the step through (once per step): each
        performer's ``in_step`` around ``train_step``."""
        for performer in self.performers.values():
            train_step = performer.in_step(train_step, step)
        return train_step

    def saving(self) -> contextlib.AbstractContextManager[None]:
        """Around one checkpoint save: each performer's ``saving``."""
        return nested([performer.saving() for performer in self.performers.values()])
