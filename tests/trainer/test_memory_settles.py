"""Under a CPU budget the real trainer (DeepSpeed on the CPU) settles on a micro-batch a
static sweep says fits, not on the floor.

Two static runs (``memory.adaptive = false``) measure the peak (process RSS after each
forward) at micro-batch 16 and 32; the budget is set between them, as in
bench/memory_adaptation.py. A run with the defaults then starts from the oversized 64
with ``memory.cpu_enforce`` (an RSS over the budget after a forward is an OOM) and must
end at 16, or one notch below it, with every late step's peak under the budget.
"""

from __future__ import annotations

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.run.directory import RunDir

pytestmark = pytest.mark.deepspeed

MODEL = {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 128}
GLOBAL_BATCH = 64


def raw(micro_batch: int, steps: int, memory: dict[str, object]) -> dict[str, object]:
    return {
        "name": "settle",
        "steps": steps,
        "model": MODEL,
        "checkpoint": {"every_steps": 0},
        "train": {"micro_batch": micro_batch, "global_batch": GLOBAL_BATCH, "precision": "fp32"},
        "memory": memory,
    }


def attempt(run: RunDir) -> SupervisorStub:
    supervisor = SupervisorStub(run.socket)
    done = run_trainer(run, 1, 240.0)
    supervisor.close()
    assert done.returncode == 0, done.stdout + done.stderr
    return supervisor


def static_peak(micro_batch: int) -> int:
    """Bytes: the largest measured step peak at a fixed ``micro_batch`` (first step left out)."""
    samples = attempt(make_run(raw(micro_batch, 5, {"adaptive": False}))).samples
    assert {s.micro_batch for s in samples} == {micro_batch}
    return max(s.mem_step_peak or 0 for s in samples[1:])


def test_an_oversized_micro_batch_settles_where_the_sweep_fits_not_on_the_floor() -> None:
    fits, too_big = static_peak(16), static_peak(32)
    assert too_big > fits, (fits, too_big)
    budget = (fits + too_big) // 2
    run = make_run(raw(GLOBAL_BATCH, 30, {"budget": budget, "cpu_enforce": True}))
    supervisor = attempt(run)

    samples = supervisor.samples
    adapted = [
        (e.data["kind"], e.data["from_micro_batch"], e.data["to_micro_batch"])
        for e in supervisor.events("memory_adapted")
    ]
    story = f"static peaks {fits}, {too_big}; budget {budget}; changes {adapted}"
    assert [s.step for s in samples] == list(range(1, 31)), story
    assert all(s.samples == GLOBAL_BATCH * s.step for s in samples), story  # the global batch kept
    settled = samples[-1].micro_batch
    assert settled in (8, 16), story  # where the sweep says it fits, not the floor
    late = [s.micro_batch for s in samples[-10:]]
    assert late == sorted(late) and len(set(late)) <= 2, story  # settled: at most one probe up, never back
    assert all((s.mem_step_peak or 0) < budget for s in samples[-10:]), story
