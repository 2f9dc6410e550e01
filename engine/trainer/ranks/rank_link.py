"""Several ranks behind rank 0's one connection to the supervisor.

Only rank 0 dials the supervisor (docs/architecture.md); the other ranks hold a ``NullLink``. What the
supervisor tells rank 0 (stop, directives) must reach every rank at the same optimizer-step
boundary, or the ranks would diverge: one rank leaving the loop while the others wait in
the next gradient all-reduce hangs the group, and a learning rate applied on one rank only
trains different models. ``sync`` runs at every boundary on every rank:

1. all-reduce MAX of [stop asked here, directives or chaos waiting here, pause asked here]:
   any rank's SIGTERM (torchrun forwards it to all) or rank 0's stop command stops every
   rank at this boundary, and rank 0's pause holds them all;
2. when directives or chaos requests wait, rank 0 broadcasts them and every rank queues
   the same lists (a step the trainer skips for an injected NaN loss is skipped by all).

One all-reduce of three int64 per step: microseconds on gloo, next to the step's own gradient
all-reduce. Events and step reports go out on rank 0 only (every rank takes the same
decisions, so rank 0's events speak for all).

Torch-free: the group is anything with ``rank``, ``max_ints`` and ``broadcast`` (see
``engine.trainer.ranks.rank_group.RankGroup``).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Protocol

from pydantic import BaseModel

from engine.trainer.link import Link, _EventSender
from engine.wire.protocol import ApplyDirective, InjectChaos


class Collectives(Protocol):
    rank: int

    def max_ints(self, values: list[int]) -> list[int]: ...

    def broadcast(self, value: Any) -> Any: ...


class RankLink(_EventSender):
    """The link every rank's loop uses when there are several ranks."""

    def __init__(self, inner: Link, group: Collectives) -> None:
        self.inner = inner
        """Rank 0: the SocketLink; other ranks: a NullLink (its stop is their SIGTERM)."""
        self.group = group
        self.stop_requested = threading.Event()
        """Agreed: set on every rank at the same boundary, by ``sync``."""
        self.directives: deque[ApplyDirective] = deque()
        """The same directives on every rank, in the same order (the applier's inbox)."""
        self.pause_requested = threading.Event()
        """Agreed like the stop: set or cleared on every rank at the same boundary."""
        self.chaos: deque[InjectChaos] = deque()
        """The same chaos requests on every rank, in the same order."""

    cores_for_others = 0
    """Several ranks keep no spare trainer (``engine.supervisor.trainers.standby``): nothing to share."""

    @property
    def stop_reason(self) -> str:
        return str(getattr(self.inner, "stop_reason", "") or "")

    def sync(self) -> None:
        """At every optimizer-step boundary, on every rank (a collective)."""
        waiting = _drain(self.inner, "directives") if self.group.rank == 0 else []
        chaos = _drain(self.inner, "chaos") if self.group.rank == 0 else []
        count = len(waiting) + len(chaos)
        asked = [self.inner.stop_requested.is_set(), count, self.inner.pause_requested.is_set()]
        stop, count, pause = self.group.max_ints([int(v) for v in asked])
        if count:
            shared = self.group.broadcast(
                ([m.model_dump(mode="json") for m in waiting], [m.model_dump(mode="json") for m in chaos])
            )
            self.directives.extend(ApplyDirective.model_validate(m) for m in shared[0])
            self.chaos.extend(InjectChaos.model_validate(m) for m in shared[1])
        if stop:
            self.stop_requested.set()
        if pause:
            self.pause_requested.set()
        else:
            self.pause_requested.clear()

    def send(self, message: BaseModel) -> None:
        if self.group.rank == 0:
            self.inner.send(message)

    def close(self) -> None:
        self.inner.close()


def _drain(link: Link, name: str) -> list[Any]:
    """Everything queued in ``link.<name>`` (a deque the reader thread appends to)."""
    inbox: deque[Any] | None = getattr(link, name, None)
    waiting = []
    while inbox:
        waiting.append(inbox.popleft())  # popleft is thread-safe against the reader's append
    return waiting
