"""A rollback: back to a verified checkpoint, with the data cursor moved past a bad window.

The data cursor. A workload draws optimizer step ``i``'s micro-batches (``i`` 0-based, the
engine's ``global_steps`` before the step) as ``batch(i + offset, micro, micro_batch)``:
``offset`` is the run's data offset, 0 until a rollback, saved in every checkpoint's
``client_state`` (``OFFSET_KEY``) and restored with it. Telemetry numbers a step after it
ran, so the step reported as ``n`` drew data position ``n - 1 + offset``.

Rolling back to a tag saved at step ``T`` with ``skip_batches = K`` resumes at step index
``T`` with offset ``offset(T) + K``: the first step after the rollback draws position
``T + offset(T) + K``. With ``K = S - T`` for a spike reported at step ``S``, the positions
``T + offset(T)`` .. ``S - 1 + offset(T)`` (the tag's steps up to and including the
spike's) are never drawn again, and the first one drawn is the one after the spike's.

The order. The supervisor writes the rollback it performs as ``ORDER_FILE`` in the
checkpoint directory (shared by every node) before the new attempt starts; a trainer that
resumes from the order's tag takes the moved offset, a trainer that resumes from a later
checkpoint (saved after the rollback) takes that checkpoint's own. So every resume after a
rollback, a crash before the first new save included, draws the same batches. Torch-free.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ORDER_FILE = "rollback.json"  # in the checkpoint directory, beside the tags
OFFSET_KEY = "data_offset"  # client_state key: data positions skipped so far (batches)
ROLLED_BACK_DIR = "rolled_back"  # in the checkpoint directory: tags newer than a rollback's
MAX_SKIP_BATCHES = 10**9  # an absurd skip beyond this is refused at the edge


class Rollback(BaseModel):
    """Where a rollback goes: a tag of this run, and the data positions it skips."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    tag: str = Field(pattern=r"^global_step\d{1,12}$")
    """The checkpoint tag to resume from, e.g. ``global_step120``."""
    skip_batches: int = Field(0, ge=0, le=MAX_SKIP_BATCHES)
    """Optimizer steps' worth of data skipped after the tag (0: replay them)."""

    @property
    def tag_step(self) -> int:
        return int(self.tag.removeprefix("global_step"))


class RollbackOrder(BaseModel):
    """The rollback the supervisor performed, as the trainer reads it (``ORDER_FILE``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    directive_id: str
    tag: str
    skip_batches: int = Field(ge=0)
    from_step: int = Field(ge=0)
    """The newest step reported before the rollback: ``from_step - tag_step`` steps given up."""


def data_position(step_index: int, offset: int) -> int:
    """The data position optimizer step ``step_index`` (0-based) draws its batch from."""
    return step_index + offset


def offset_after(tag_offset: int, skip_batches: int) -> int:
    """The data offset a run resumed from a tag (saved with ``tag_offset``) continues with."""
    return tag_offset + skip_batches


def skip_past(tag_step: int, spike_step: int) -> int:
    """The skip that leaves out every position from the tag's up to the spike's: ``spike_step``
    as telemetry numbers it (after the step), so that step drew position ``spike_step - 1``."""
    return max(0, spike_step - tag_step)


def resumed_offset(order: RollbackOrder | None, tag: str | None, client_state: dict[str, Any]) -> int:
    """The data offset of a run resumed from ``tag`` (None: a fresh start) with its ``client_state``."""
    saved = int(client_state.get(OFFSET_KEY, 0)) if tag is not None else 0
    if order is not None and tag == order.tag:
        return offset_after(saved, order.skip_batches)
    return saved


def write_order(checkpoints: Path, order: RollbackOrder) -> None:
    """Durably: a temporary file, fsync, rename over the previous order."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    temporary = checkpoints / f".{ORDER_FILE}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(order.model_dump_json())
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, checkpoints / ORDER_FILE)


def read_order(checkpoints: Path) -> RollbackOrder | None:
    """The newest rollback's order, or None (none yet, or unreadable: then no cursor moves)."""
    try:
        return RollbackOrder.model_validate(json.loads((checkpoints / ORDER_FILE).read_text("utf-8")))
    except (OSError, ValueError):
        return None
