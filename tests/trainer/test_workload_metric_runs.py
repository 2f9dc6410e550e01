"""The real trainer (real DeepSpeed on the CPU) with workloads that report metrics of their
own: the guide's example (docs/your-model.md) reports its accuracy every step; a hostile one
trains on with one warning per bad metric."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hostile_metrics_workload import EXTRA_NAMES
from trainer_harness import REPO_ROOT, SupervisorStub, make_run, run_trainer

from engine.events import MetricWarning
from engine.measures.user_metrics import MAX_METRICS

pytestmark = pytest.mark.deepspeed

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(raw: dict) -> tuple[SupervisorStub, str]:  # type: ignore[type-arg]
    """The trainer to the end against a stub supervisor: what it sent, and its log's text."""
    run = make_run({"checkpoint": {"every_steps": 0}, "train": {"precision": "fp32"}, **raw})
    supervisor = SupervisorStub(run.socket)
    done = run_trainer(run)
    supervisor.close()
    assert done.returncode == 0, done.stdout + done.stderr
    return supervisor, done.stdout + done.stderr


def test_the_example_workload_reports_its_accuracy_every_step() -> None:
    supervisor, _ = _run(
        {"name": "spiral", "steps": 40, "workload": "spiral_workload:build", "workload_dir": str(EXAMPLES)}
    )
    samples = supervisor.samples
    assert [s.step for s in samples] == list(range(1, 41))
    assert all(s.metrics is not None and set(s.metrics) == {"accuracy"} for s in samples)
    accuracy = [s.metrics["accuracy"] for s in samples if s.metrics]
    assert all(0.0 <= a <= 1.0 for a in accuracy)
    # mean over the step's 2 micro-batches of 32: a multiple of 1/64
    assert all(math.isclose(a * 64, round(a * 64), abs_tol=1e-4) for a in accuracy)
    assert supervisor.events(MetricWarning.event_type) == []


def test_a_hostile_workload_trains_on_with_one_warning_per_bad_metric() -> None:
    supervisor, output = _run(
        {
            "name": "hostile",
            "steps": 6,
            "workload": "hostile_metrics_workload:build",
            "workload_dir": str(Path(__file__).parent),
        }
    )
    samples = supervisor.samples
    assert [s.step for s in samples] == list(range(1, 7)) and all(math.isfinite(s.loss) for s in samples)
    kept = {"good", *(f"extra_{i:02d}" for i in range(MAX_METRICS - 1))}
    assert all(s.metrics is not None and set(s.metrics) == kept for s in samples)
    assert all(s.metrics and s.metrics["good"] == 1.0 for s in samples)
    warnings = supervisor.events(MetricWarning.event_type)
    dropped = ["'nan'", "'text'", "'nnnn", *(f"'extra_{i:02d}'" for i in range(MAX_METRICS - 1, EXTRA_NAMES))]
    assert len(warnings) == len(dropped)  # once each, over six steps
    for name in dropped:
        assert sum(name in w.message for w in warnings) == 1, name
    assert {w.severity for w in warnings} == {"warning"} and {w.data["step"] for w in warnings} == {1}
    assert all(w.message in output for w in warnings)  # the trainer's log too (memtui logs)


@pytest.mark.e2e
def test_two_ranks_average_agreeing_metrics_and_fall_back_to_rank_0s_once_they_differ() -> None:
    from rank_metrics_workload import DIVERGE_AFTER
    from test_ranks import TWO_RANKS, logs, supervise

    from engine.run.storage.store import Store
    from engine.trainer.telemetry.step_metrics import RANKS_DISAGREE

    steps = DIVERGE_AFTER + 4
    run = make_run(
        {
            "name": "rank-metrics",
            "steps": steps,
            "checkpoint": {"every_steps": 0},
            "train": {**TWO_RANKS, "precision": "fp32"},
            "workload": "rank_metrics_workload:build",
            "workload_dir": str(Path(__file__).parent),
        }
    )
    proc = supervise(run, {"PYTHONPATH": str(REPO_ROOT)})  # torchrun's ranks: this checkout's engine
    assert proc.wait(timeout=300) == 0, logs(run, proc)
    with Store(run.store, readonly=True) as store:
        samples = store.steps()
        warnings = [e for e in store.events_since(0) if e.type == MetricWarning.event_type]
    assert [s.step for s in samples] == list(range(1, steps + 1)), logs(run, proc)
    assert all(s.micro_batch == 8 and s.grad_accum == 1 for s in samples)  # one forward per step
    assert [s.metrics for s in samples[:DIVERGE_AFTER]] == [{"rank": 0.5}] * DIVERGE_AFTER
    assert [s.metrics for s in samples[DIVERGE_AFTER:]] == [{"rank": 0.0}] * (steps - DIVERGE_AFTER)
    assert [w.message for w in warnings] == [RANKS_DISAGREE]
