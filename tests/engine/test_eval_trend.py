"""The eval-loss trend the rule planner cites: the held-out loss rising while the train
loss falls, attached to a learning-rate suggestion's evidence. Pure."""

from __future__ import annotations

import math

import planner_samples

from engine.config.config_file import build_run_config
from engine.directives.eval_trend import RISING_EVALS, EvalTrend
from engine.directives.planners.factory import RulePlanning
from engine.directives.planners.rules import RulePlanner
from engine.directives.queue import DirectiveQueue
from engine.events import EvalCompleted
from tests.fakes.event_log import EventLog

CONFIG = build_run_config({})


def test_rising_eval_loss_while_the_train_loss_falls_is_evidence() -> None:
    trend = EvalTrend()
    for n, (held_out, train) in enumerate([(3.0, 2.9), (3.1, 2.8), (3.2, 2.7)]):
        assert trend.evidence() is None  # fewer than RISING_EVALS so far
        trend.note(100 * (n + 1), held_out, train)
    line = trend.evidence()
    assert line is not None and f"the last {RISING_EVALS} evals" in line
    assert "3 at step 100 -> 3.2 at step 300" in line and "2.9 -> 2.7" in line


def test_no_evidence_when_either_loss_does_not_move_that_way() -> None:
    both_rising, eval_dips, unknown = EvalTrend(), EvalTrend(), EvalTrend()
    for step, held_out, train in [(1, 3.0, 2.0), (2, 3.1, 2.1), (3, 3.2, 2.2)]:
        both_rising.note(step, held_out, train)  # training diverges too: not overfitting
    for step, held_out in [(1, 3.0), (2, 3.2), (3, 3.1)]:
        eval_dips.note(step, held_out, 3.0 - step)
    for step, held_out, train in [(1, 3.0, 2.9), (2, 3.1, None), (3, 3.2, 2.7), (4, math.nan, 2.6)]:
        unknown.note(step, held_out, train)  # a gap starts the trend again
    assert both_rising.evidence() is None and eval_dips.evidence() is None and unknown.evidence() is None


def test_the_rule_planner_cites_the_trend_in_a_learning_rate_suggestion() -> None:
    planner = RulePlanner(CONFIG)
    step = 0
    for eval_loss in (3.0, 3.1, 3.2):
        for _ in range(10):
            step += 1
            planner.observe(planner_samples.sample(step, loss=3.0 - step / 100), {})
        planner.observe_eval(step, eval_loss)
    (spike,) = planner.observe(planner_samples.sample(step + 1, loss=50.0), {})
    assert spike.values == {"lr_multiplier": 0.5}
    assert "eval loss rising over the last 3 evals" in spike.evidence[-1]


def test_the_supervisor_s_rule_planning_hands_evals_to_the_rules() -> None:
    """Through the queue: the proposal's stored evidence carries the eval trend."""
    config = build_run_config({"policy": {"planner": "rules"}})
    queue = DirectiveQueue(config, EventLog(), lambda message: True, lambda: 1_000_000.0, lambda record: None)
    planning = RulePlanning(queue)
    step = 0
    for eval_loss in (3.0, 3.1, 3.2):
        for _ in range(10):
            step += 1
            telemetry = planner_samples.sample(step, loss=3.0 - step / 100)
            queue.on_step(telemetry)
            planning.on_step(telemetry, lambda task: None)
        planning.on_eval(EvalCompleted(step=step, loss=eval_loss, batches=8, seconds=0.1))
    spike = planner_samples.sample(step + 1, loss=50.0)
    queue.on_step(spike)
    planning.on_step(spike, lambda task: None)
    (entry,) = queue.entries.values()
    assert any("eval loss rising" in line for line in entry.directive.evidence)
