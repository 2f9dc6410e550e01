"""The trainer's data cursor: a resumed run's offset (its checkpoint's, moved by a rollback
order for the order's tag) and the workload's batches shifted by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from engine.rollback import OFFSET_KEY, RollbackOrder, write_order
from engine.trainer.checkpoints.checkpoint import Resumed
from engine.trainer.checkpoints.data_cursor import offset_of, shifted


def resumed(tag: str, **state: Any) -> Resumed:
    step = int(tag.removeprefix("global_step"))
    return Resumed(path="x", tag=tag, step=step, client_state=state, skipped=[], converted_from_world=None)


def test_a_rollback_order_moves_the_cursor_of_its_tag_only(tmp_path: Path) -> None:
    assert (
        offset_of(tmp_path, None) == 0
        and offset_of(tmp_path, resumed("global_step20", **{OFFSET_KEY: 3})) == 3
    )
    write_order(
        tmp_path, RollbackOrder(directive_id="d-1", tag="global_step20", skip_batches=7, from_step=30)
    )
    assert offset_of(tmp_path, resumed("global_step20", **{OFFSET_KEY: 3})) == 10
    assert offset_of(tmp_path, resumed("global_step40", **{OFFSET_KEY: 10})) == 10


def test_shifted_batches_draw_the_data_position() -> None:
    def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.tensor([step, micro, micro_batch]),)

    assert shifted(batch, 0) is batch
    assert shifted(batch, 7)(20, 1, 4)[0].tolist() == [27, 1, 4]
