"""The ZeRO-3 DeepSpeed JSON of the InfiniBand article the project started from, as written
there (batch 512, 4 accumulation steps, the optimizer offloaded to the CPU, overlap_comm,
contiguous_gradients, fp16), trains and checkpoints on the CPU: its owned keys are read into
[train], the offload options reach DeepSpeed untouched."""

from __future__ import annotations

import pytest
from test_trainer_runs import _run

from engine.trainer.checkpoints.checkpoint import tags_on_disk
from tests.engine.test_deepspeed_adoption import SEED_ZERO3

pytestmark = pytest.mark.deepspeed


def test_the_seed_zero3_json_trains_as_written() -> None:
    raw = {"name": "seedjson", "steps": 2, "checkpoint": {"every_steps": 2}, "deepspeed_config": SEED_ZERO3}
    run, supervisor, code, output = _run(raw)
    assert code == 0, output
    samples = supervisor.samples
    assert [s.step for s in samples] == [1, 2]
    assert all((s.micro_batch, s.grad_accum, s.samples) == (128, 4, 512 * s.step) for s in samples)
    assert [step for step, _ in tags_on_disk(run.checkpoints)] == [2]
