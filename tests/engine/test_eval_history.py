"""A run's evals read back from its store: ``status``'s newest eval, the report's first,
best and last eval loss and the share of time evals held training."""

from __future__ import annotations

import math

from engine.events import EvalCompleted
from engine.run.directory import RunDir
from engine.run.reports.endurance_report import endurance_report
from engine.run.reports.eval_history import EvalLosses, StoredEval, eval_columns, stored_evals
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store
from memtui.endurance_markdown import render_markdown
from memtui.status_report import render_status
from tests.fakes.run_script import make_sample

EVALS = [(200, 4.0, {"acc": 0.25}), (400, 3.0, {}), (600, 3.5, {"acc": 0.5, "ppl": 33.1})]


def store_evals(run: RunDir) -> None:
    with Store(run.store) as store:
        for step in range(1, 4):
            store.add_step(make_sample(step, ts=1000.0 + 10 * step))
        for step, loss, metrics in EVALS:
            done = EvalCompleted(step=step, loss=loss, batches=8, seconds=2.0, metrics=metrics)
            store.append_event(done.event_type, data=done.data(), attempt=1)
        store.append_event("eval_completed", data={"step": "damaged"}, attempt=1)  # left out
        store.append_event("run_started")


def test_status_carries_the_newest_eval(run: RunDir) -> None:
    assert offline_status(run).last_eval is None
    store_evals(run)
    last = offline_status(run).last_eval
    assert last is not None and (last.step, last.loss, last.metrics) == (600, 3.5, {"acc": 0.5, "ppl": 33.1})
    assert offline_status(run).model_dump(mode="json")["last_eval"]["step"] == 600  # status --json


def test_the_report_has_first_best_last_and_the_time_evals_held_training(run: RunDir) -> None:
    store_evals(run)
    with Store(run.store, readonly=True) as store:
        evals = stored_evals(store)
        report = endurance_report(run, store)
    assert [e.result.step for e in evals] == [200, 400, 600]
    assert eval_columns(evals) == [
        "step",
        "loss",
        "batches",
        "seconds",
        "attempt",
        "ts",
        "metrics.acc",
        "metrics.ppl",
    ]
    losses = report.evals
    assert losses is not None and losses.count == 3 and losses.seconds == 6.0
    assert (losses.first.step, losses.best.step, losses.last.step) == (200, 400, 600)
    assert 0 < report.eval_share == 6.0 / report.wall_s
    assert "| eval loss first / best / last | 4.000 (step 200) / 3.000 (step 400) / 3.500 (step 600) |" in (
        render_markdown(report)
    )


def test_a_diverged_eval_is_never_the_best() -> None:
    nan, fine = (
        EvalCompleted(step=1, loss=math.nan, batches=1, seconds=0.0),
        EvalCompleted(step=2, loss=5.0, batches=1, seconds=0.0),
    )
    losses = EvalLosses.of([StoredEval(nan, 0.0, 1), StoredEval(fine, 1.0, 1)])
    assert losses is not None and losses.best.step == 2 and EvalLosses.of([]) is None


def test_status_in_words_says_the_newest_eval(run: RunDir) -> None:
    store_evals(run)
    text = render_status(offline_status(run), now=2000.0)
    assert "eval loss    3.500 at step 600, acc 0.5, ppl 33.1" in text
