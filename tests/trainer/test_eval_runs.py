"""Evals in a real run: DeepSpeed on the CPU, two ranks under torchrun, the real supervisor
and store (the built-in workload's held-out bytes)."""

from __future__ import annotations

import math

import pytest
from test_ranks import TWO_RANKS, logs, supervise
from trainer_harness import make_run

from engine.events import EvalCompleted
from engine.run.storage.store import Store

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e]


def test_two_ranks_store_an_averaged_eval_at_the_configured_steps() -> None:
    """Every 3 steps, 3 held-out batches: rank 0 takes two, rank 1 one, and the stored eval
    counts all three (a mean over both ranks); its seconds ride on the next step's sample."""
    run = make_run(
        {
            "name": "evals",
            "steps": 7,
            "checkpoint": {"every_steps": 0},
            "train": TWO_RANKS,
            "eval": {"every_steps": 3, "batches": 3},
        }
    )
    proc = supervise(run)
    assert proc.wait(timeout=300) == 0, logs(run, proc)
    with Store(run.store, readonly=True) as store:
        steps = {s.step: s for s in store.steps()}
        events = store.events_since(0)
    evals = [p for p in (EvalCompleted.of(e) for e in events) if p is not None]
    assert [e.step for e in evals] == [3, 6], logs(run, proc)
    assert all(e.batches == 3 and math.isfinite(e.loss) and 4.0 < e.loss < 6.5 for e in evals)
    assert all(e.seconds > 0 for e in evals)
    assert {step for step, s in steps.items() if s.eval_s is not None} == {4, 7}
    assert steps[4].eval_s == pytest.approx(evals[0].seconds)
