"""The trainer's data cursor: which data position each optimizer step draws from.

``engine.rollback`` defines the arithmetic (position = step index + offset) and the
rollback order; here the offset of a resumed run is read (its checkpoint's own, moved by
the order when it resumed from the order's tag) and the workload's batches are shifted by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from engine.rollback import data_position, read_order, resumed_offset
from engine.trainer.checkpoints.checkpoint import Resumed

log = logging.getLogger(__name__)

T = TypeVar("T")


def offset_of(checkpoints: Path, resumed: Resumed | None) -> int:
    """The data offset this attempt trains with (0 for a fresh start without a rollback)."""
    order = read_order(checkpoints)
    tag = resumed.tag if resumed else None
    offset = resumed_offset(order, tag, resumed.client_state if resumed else {})
    if order is not None and tag == order.tag:
        log.info("resumed from %s after a rollback: %d steps of data skipped", tag, order.skip_batches)
    return offset


def shifted(batch: Callable[[int, int, int], T], offset: int) -> Callable[[int, int, int], T]:
    """``batch`` (or ``lengths``: any (step, micro, micro_batch) function of the data) with
    each step index moved to its data position (itself when offset is 0)."""
    if offset == 0:
        return batch
    return lambda step, micro, micro_batch: batch(data_position(step, offset), micro, micro_batch)
