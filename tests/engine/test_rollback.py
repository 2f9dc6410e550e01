"""Rollbacks without processes: the data cursor's arithmetic, the robust z-score of a loss
spike, the rollback the rule planner proposes with its evidence, and the policy's checks."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.directives.directive import DirectiveRefused, draft
from engine.directives.planners.rules import RulePlanner
from engine.directives.policy import LocalPolicyEngine, PolicyContext
from engine.directives.rollback_check import RollbackLimits, rollback_refusal
from engine.directives.spike_score import SPIKE_Z, robust_z, rollback_for
from engine.rollback import (
    OFFSET_KEY,
    Rollback,
    RollbackOrder,
    data_position,
    read_order,
    resumed_offset,
    skip_past,
    write_order,
)
from tests.engine.planner_samples import sample

NOW = 1_000_000.0
CONFIG = build_run_config({"train": {"micro_batch": 8, "global_batch": 64}})
LIMITS = RollbackLimits(horizon_steps=500, min_gap_steps=100, max_rollbacks=2)
VERIFIED = {"global_step100": 100, "global_step200": 200, "global_step300": 300}


# ------------------------------------------------------------------ the data cursor


def test_the_step_after_a_rollback_draws_the_position_after_the_spikes() -> None:
    tag_step, spike_step, tag_offset = 200, 237, 5  # spike reported after step index 236 ran
    spiked_position = data_position(spike_step - 1, tag_offset)
    skip = skip_past(tag_step, spike_step)
    order = RollbackOrder(directive_id="d-1", tag="global_step200", skip_batches=skip, from_step=240)
    offset = resumed_offset(order, "global_step200", {OFFSET_KEY: tag_offset})
    first = data_position(tag_step, offset)  # the first step index after the resume is the tag's step
    assert first == spiked_position + 1
    skipped = range(data_position(tag_step, tag_offset), first)
    assert len(skipped) == skip == 37 and spiked_position in skipped


def test_resumes_after_a_rollback_keep_their_cursor() -> None:
    order = RollbackOrder(directive_id="d-1", tag="global_step200", skip_batches=37, from_step=240)
    assert resumed_offset(order, "global_step200", {}) == 37  # a crash before any new save: the same skip
    assert resumed_offset(order, "global_step250", {OFFSET_KEY: 37}) == 37  # a save after it carries it
    assert resumed_offset(None, "global_step250", {OFFSET_KEY: 37}) == 37
    assert resumed_offset(order, None, {}) == 0  # a fresh start draws from position 0


def test_the_order_survives_a_round_trip_and_an_unreadable_one_moves_nothing(tmp_path: Path) -> None:
    order = RollbackOrder(directive_id="d-1", tag="global_step200", skip_batches=37, from_step=240)
    write_order(tmp_path, order)
    assert read_order(tmp_path) == order
    (tmp_path / "rollback.json").write_text("{not json")
    assert read_order(tmp_path) is None


def test_a_rollback_is_refused_at_the_edge_naming_its_field() -> None:
    with pytest.raises(DirectiveRefused, match="rollback.tag"):
        draft({"rollback": {"tag": "../../etc", "skip_batches": 0}}, source="operator", step=1, ttl_s=60)
    with pytest.raises(DirectiveRefused, match="rollback.skip_batches"):
        draft({"rollback": {"tag": "global_step1", "skip_batches": -3}}, source="operator", step=1, ttl_s=60)


# --------------------------------------------------------------- the z-score rule


def noisy(n: int, seed: int = 0, level: float = 2.0) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0.0, 0.02) for _ in range(n)]


def test_the_robust_z_ignores_an_earlier_spike_in_its_window() -> None:
    window = noisy(40)
    clean = robust_z(window, 2.05)
    poisoned = robust_z([*window[:-1], 50.0], 2.05)  # one earlier spike: median and MAD barely move
    assert clean is not None and poisoned is not None
    assert not clean.spike and abs(poisoned.z - clean.z) < 0.5
    spike = robust_z(window, 6.0)
    assert spike is not None and spike.spike and spike.z > SPIKE_Z
    assert robust_z(window[:5], 6.0) is None  # too few to judge
    flat = robust_z([2.0] * 30, 2.0)
    assert flat is not None and math.isfinite(flat.z)


def test_the_tag_chosen_is_the_newest_before_the_spike_within_the_horizon() -> None:
    assert rollback_for(300, VERIFIED, 500) == Rollback(tag="global_step200", skip_batches=100)
    assert rollback_for(301, VERIFIED, 500) == Rollback(tag="global_step300", skip_batches=1)
    assert rollback_for(301, VERIFIED, 0) is None
    assert rollback_for(50, VERIFIED, 500) is None


def test_the_rule_planner_proposes_a_rollback_with_its_evidence() -> None:
    planner = RulePlanner(CONFIG)
    for step, loss in enumerate(noisy(60), start=1):
        at = sample(step, loss=loss, grad_norm=1.0)
        assert planner.observe(at, {}, checkpoints={"global_step50": 50}) == []
    spiked = sample(61, loss=9.0, grad_norm=1000.0)  # the gradient rule is tripped too: one answer
    [suggestion] = planner.observe(spiked, {}, checkpoints={"global_step50": 50})
    assert suggestion.rollback == Rollback(tag="global_step50", skip_batches=11) and suggestion.values == {}
    evidence = "\n".join(suggestion.evidence)
    assert "robust z" in evidence and "50-step window" in evidence and "global_step50" in evidence
    assert "skip 11 steps" in evidence


def test_without_a_checkpoint_a_spike_is_the_learning_rate_rules() -> None:
    planner = RulePlanner(CONFIG)
    for step, loss in enumerate(noisy(60), start=1):
        planner.observe(sample(step, loss=loss), {})
    [suggestion] = planner.observe(sample(61, loss=9.0), {})
    assert suggestion.rollback is None and "lr_multiplier" in suggestion.values


# ------------------------------------------------------------------ the policy


def judged(rollback: dict[str, Any], **over: Any) -> Any:
    policy = LocalPolicyEngine(CONFIG)
    context = PolicyContext(**{"now": NOW + 1, "step": 320, "checkpoints": VERIFIED, **over})
    directive = draft({"rollback": rollback}, source="operator", step=context.step, ttl_s=60.0, now=NOW)
    return policy.evaluate(directive, context)


def test_the_policy_allows_a_verified_recent_tag_and_says_what_is_given_up() -> None:
    verdict = judged({"tag": "global_step300", "skip_batches": 20})
    assert verdict.decision == "allow" and verdict.patch == {}
    assert "20 steps given up" in verdict.reasons[0] and "20 steps of data skipped" in verdict.reasons[0]


@pytest.mark.parametrize(
    ("rollback", "over", "why"),
    [
        ({"tag": "global_step250", "skip_batches": 0}, {}, "global_step250 is not a checkpoint of this run"),
        ({"tag": "global_step300", "skip_batches": 0}, {"step": 300}, "is not before the newest step"),
        ({"tag": "global_step100", "skip_batches": 0}, {"step": 3000}, "rollback_horizon_steps"),
        ({"tag": "global_step300", "skip_batches": 10**6}, {}, "rollback.skip_batches"),
        ({"tag": "global_step300", "skip_batches": 1}, {"rolled_back_to": (300,)}, "rollback_min_gap_steps"),
    ],
)
def test_the_policy_refuses_a_rollback_naming_why(rollback: dict[str, Any], over: Any, why: str) -> None:
    verdict = judged(rollback, **over)
    assert verdict.decision == "reject" and why in verdict.reasons[0]


def test_rollbacks_are_limited_in_number_and_in_spacing() -> None:
    rollback = Rollback(tag="global_step300", skip_batches=1)
    assert rollback_refusal(rollback, 320, VERIFIED, (), LIMITS) is None
    assert rollback_refusal(rollback, 320, VERIFIED, (100,), LIMITS) is None  # 220 steps since
    assert "rollback_min_gap_steps" in str(rollback_refusal(rollback, 320, VERIFIED, (250,), LIMITS))
    assert "rollback_max" in str(rollback_refusal(rollback, 320, VERIFIED, (10, 100), LIMITS))


def test_a_rollback_changes_nothing_else() -> None:
    policy = LocalPolicyEngine(CONFIG)
    values = {"rollback": {"tag": "global_step300", "skip_batches": 1}, "lr_multiplier": 0.5}
    directive = draft(values, source="operator", step=320, ttl_s=60.0, now=NOW)
    verdict = policy.evaluate(directive, PolicyContext(now=NOW + 1, step=320, checkpoints=VERIFIED))
    assert verdict.decision == "reject" and "changes nothing else" in verdict.reasons[0]


# ------------------------------------------------------------------ the queue


def queue_at(step: int) -> tuple[Any, list[Any], list[Any]]:
    from engine.directives.queue import DirectiveQueue

    performed: list[Any] = []
    sent: list[Any] = []
    queue = DirectiveQueue(CONFIG, lambda *_a, **_k: None, lambda m: sent.append(m) or True, lambda: NOW)
    queue.latest = sample(step)
    queue.checkpoints = lambda: dict(VERIFIED)
    queue.perform_rollback = lambda entry, at: performed.append((entry.directive.rollback, at))
    return queue, performed, sent


def test_an_approved_rollback_goes_to_the_supervisor_not_the_trainer() -> None:
    queue, performed, sent = queue_at(320)
    entry = queue.propose_raw({"rollback": {"tag": "global_step300", "skip_batches": 20}}, "operator")
    assert entry.state == "pending"
    queue.approve(entry.directive.id)
    assert performed == [(Rollback(tag="global_step300", skip_batches=20), 320)] and sent == []
    assert entry.state == "applied" and queue.rolled_back_to == [300]
    again = queue.propose_raw({"rollback": {"tag": "global_step300", "skip_batches": 1}}, "operator")
    assert again.state == "rejected" and "rollback_min_gap_steps" in again.reasons[0]  # at once again


def test_without_a_performer_every_rollback_is_refused() -> None:
    queue, _performed, _sent = queue_at(320)
    queue.perform_rollback = None
    entry = queue.propose_raw({"rollback": {"tag": "global_step300", "skip_batches": 1}}, "operator")
    assert entry.state == "rejected" and "not a checkpoint of this run" in entry.reasons[0]
