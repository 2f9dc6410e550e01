"""OOMs injected into the real trainer (DeepSpeed on the CPU) are survived.

``MEMTUI_INJECT_OOM`` raises MemoryError inside a micro-batch's forward or backward. The
window is thrown away and redone at a smaller micro-batch: the step counter advances once
for it, samples stay ``global_batch x step``, and the loss matches an uninterrupted run
(the SampleWindow gives the step the same samples whatever the geometry).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.run.directory import RunDir
from engine.trainer.memory.oom_injection import INJECT_OOM_ENV

pytestmark = pytest.mark.deepspeed

GEOMETRY = {"micro_batch": 4, "global_batch": 8, "warmup_steps": 2}


@contextmanager
def injected(spec: str) -> Iterator[None]:
    os.environ[INJECT_OOM_ENV] = spec
    try:
        yield
    finally:
        os.environ.pop(INJECT_OOM_ENV, None)


def attempt(run: RunDir, number: int = 1) -> tuple[SupervisorStub, int, str]:
    if run.socket.exists():
        run.socket.unlink()
    supervisor = SupervisorStub(run.socket)
    done = run_trainer(run, number)
    supervisor.close()
    return supervisor, done.returncode, done.stdout + done.stderr


def config(stage: int, steps: int = 8, **train: object) -> dict:
    return {
        "name": "oom",
        "steps": steps,
        "checkpoint": {"every_steps": 0},
        "train": {**GEOMETRY, "zero_stage": stage, **train},
    }


@pytest.mark.parametrize("stage", [0, 2])
def test_oom_mid_window_is_redone_at_a_smaller_micro_batch(stage: int) -> None:
    reference, code, output = attempt(make_run(config(stage)))
    assert code == 0, output
    run = make_run(config(stage))
    with injected("3:1:backward"):  # step 3 (0-based), second of two micro-batches
        supervisor, code, output = attempt(run)
    assert code == 0, output
    left = json.loads((run.path / "memory.json").read_text())  # for a later attempt
    assert left["micro_batch"] == 2 and left["history"]["failures"]["4"][0] == 3
    assert "reason" not in left  # redone in place: nothing for the supervisor to report

    samples = supervisor.samples
    assert [s.step for s in samples] == list(range(1, 9))  # the OOM'd window counted once
    assert all(s.samples == 8 * s.step for s in samples)  # no sample lost or counted twice
    assert all(s.micro_batch * s.grad_accum * s.world_size == 8 for s in samples)
    assert [(s.micro_batch, s.grad_accum) for s in samples] == [(4, 2)] * 3 + [(2, 4)] * 5
    for ours, theirs in zip(samples, reference.samples, strict=True):
        assert ours.loss == pytest.approx(theirs.loss, abs=0.01)  # same samples, same optimizer
    adapted = supervisor.events("memory_adapted")
    assert len(adapted) == 1 and adapted[0].severity == "warning"
    data = adapted[0].data
    assert data["kind"] == "oom" and "MemoryError" in data["reason"]
    redone = next(s for s in samples if s.micro_batch == 2)
    assert (
        data["step"] == redone.step == 4 and f"at step {redone.step}" in adapted[0].message
    )  # the redone step
    assert (data["from_micro_batch"], data["to_micro_batch"]) == (4, 2)
    assert (data["from_grad_accum"], data["to_grad_accum"]) == (2, 4)
    assert data["mem_before"] > 0 and data["mem_after_predicted"] > 0


def test_zero3_oom_exits_for_a_restart_that_uses_the_smaller_micro_batch() -> None:
    run = make_run(config(3, steps=6))
    with injected("3:1:backward:4"):  # fires only while the micro-batch is >= 4
        first, code, output = attempt(run, 1)
        assert code == 1, output
        error = first.events("trainer_error")[0]
        assert error.data["error"] == "MemoryHalt" and error.data["restartable"] is True
        assert "ZeRO-3" in error.message and "micro-batch 2" in error.message
        left = json.loads((run.path / "memory.json").read_text())
        assert left["micro_batch"] == 2 and "OOM at ZeRO-3 in step 4" in left["reason"]  # step 4 is redone
        assert left["history"]["failures"]["4"][0] == 3  # what the controller learnt, for the next

        second, code, output = attempt(run, 2)  # what the supervisor's restart does
    assert code == 0, output
    assert second.events("memory_adapted")[0].data["kind"] == "resume"
    # The second attempt started from the first's history (not a fresh one) and kept it; its
    # routine save has no "reason" (the supervisor reads one as an OOM's word).
    kept = json.loads((run.path / "memory.json").read_text())
    assert kept["history"]["failures"]["4"] == left["history"]["failures"]["4"] and "reason" not in kept
    samples = second.samples
    assert [s.step for s in samples] == list(range(1, 7)) and all(s.samples == 8 * s.step for s in samples)
    assert all((s.micro_batch, s.grad_accum) == (2, 4) for s in samples)


def test_oom_at_micro_batch_one_stops_with_a_checkpoint_and_a_reason() -> None:
    run = make_run(config(0, steps=6, micro_batch=1, global_batch=2))
    with injected("2:0:forward"):
        supervisor, code, output = attempt(run)
    assert code == 1, output
    exhausted = supervisor.events("memory_exhausted")
    assert exhausted and exhausted[0].severity == "critical" and "smallest" in exhausted[0].message
    assert exhausted[0].data["step"] == 3 and "in step 3" in exhausted[0].message  # after steps 1 and 2
    assert [e.data["step"] for e in supervisor.events("checkpoint_saved")] == [2]
    error = supervisor.events("trainer_error")[0]
    assert error.data["error"] == "MemoryHalt" and error.data["restartable"] is False
    assert [s.step for s in supervisor.samples] == [1, 2]
    assert not supervisor.events("trainer_finished")
