"""The prefetcher on the real trainer: batches built ahead on a background thread are the
batches the loop would build itself, so a prefetched run that is stopped and resumed trains
exactly the losses of an unprefetched run straight through; each step reports its data-wait.
(The built-in workload at two micro-batches a step, so most batches are built ahead.)"""

from __future__ import annotations

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir

pytestmark = pytest.mark.deepspeed

RAW = {
    "name": "prefetch",
    "steps": 8,
    "checkpoint": {"every_steps": 4},
    "train": {"micro_batch": 2, "global_batch": 4, "precision": "fp32"},
}


def attempt(run: RunDir, n: int) -> SupervisorStub:
    if run.socket.exists():
        run.socket.unlink()
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, n)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr
    return stub


def test_a_prefetched_run_resumed_halfway_trains_the_losses_of_an_unprefetched_one() -> None:
    straight = make_run({**RAW, "train": {**RAW["train"], "prefetch": False}})
    expected = {s.step: s.loss for s in attempt(straight, 1).samples}
    assert sorted(expected) == list(range(1, 9))

    ahead = {**RAW, "train": {**RAW["train"], "prefetch": True}}  # "auto" is off on the CPU
    prefetched = make_run({**ahead, "steps": 4})
    first = attempt(prefetched, 1).samples
    prefetched.write_config(build_run_config(ahead))  # on to step 8, from the checkpoint at 4
    second = attempt(prefetched, 2).samples
    assert [s.step for s in first + second] == list(range(1, 9))
    assert {s.step: s.loss for s in first + second} == expected
    assert all(s.grad_accum == 2 and s.data_wait_s is not None for s in first + second)
    assert all(0.0 <= s.data_wait_s <= s.step_time_s for s in first + second if s.data_wait_s is not None)
