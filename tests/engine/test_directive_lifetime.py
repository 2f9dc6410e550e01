"""Directives against the run's health and lifetime: remedies pass a NaN alert while
risk-adding directives are blocked; directives end with their run; a restarted trainer gets
the approved ones it had not applied (or they expire by TTL); an applied one's effect."""

from __future__ import annotations

from typing import Any

import pytest
from planner_samples import sample
from test_directive_queue import Harness, config

from engine.alerts.health import health_problems
from engine.directives.queue import DirectiveError

NAN_ALERT = {"loss_nan": "loss is nan at step 5"}


def unhealthy(h: Harness) -> None:
    h.queue.problems = health_problems(None, NAN_ALERT)


@pytest.mark.parametrize(
    "remedy",
    [
        {"lr_multiplier": 0.5},
        {"gradient_clip_norm": 0.5},
        {"loss_scale_initial_power": 8},
        {"micro_batch_size": 4},
    ],
)
def test_a_remedy_passes_a_nan_alert_with_the_reason_stored(remedy: dict[str, Any]) -> None:
    h = Harness(config())
    unhealthy(h)
    entry = h.queue.propose_raw(remedy, "rules")
    assert entry.state == "pending", entry.reasons
    (note,) = entry.verdict.reasons
    assert note.startswith("environment unhealthy: loss is nan at step 5; let through as a remedy")
    assert h.kept[-1].reasons == entry.reasons  # the stored decision row says why too
    assert h.queue.approve(entry.directive.id).state == "approved"  # the re-check agrees


@pytest.mark.parametrize(
    ("risky", "field"),
    [
        ({"lr_multiplier": 2.0}, "lr_multiplier"),  # clamped to 1.5 first: still above 1
        ({"gradient_clip_norm": 1.25}, "gradient_clip_norm"),
        ({"micro_batch_size": 16, "lr_multiplier": 0.5}, "micro_batch_size"),
    ],
)
def test_risk_adding_directives_are_blocked_under_a_nan_alert(risky: dict[str, Any], field: str) -> None:
    h = Harness(config(lr_multiplier_max=1.5))
    h.queue.latest = sample(step=5, micro_batch=8, mem_predicted=1, mem_budget=1 << 40)
    unhealthy(h)
    entry = h.queue.propose_raw(risky, "rules")
    if field == "micro_batch_size":
        assert entry.state == "rejected"  # the global batch (8) allows no 16 either
        return
    assert entry.state == "rejected", entry.reasons
    assert "loss is nan" in entry.reasons[0] and f"{field} " in entry.reasons[0]
    assert "adds risk" in entry.reasons[0]


def test_a_pending_risky_directive_is_refused_on_approval_once_the_loss_is_nan() -> None:
    h = Harness(config())
    entry = h.queue.propose_raw({"gradient_clip_norm": 1.25}, "operator")
    assert entry.state == "pending"
    unhealthy(h)
    decided = h.queue.approve(entry.directive.id)
    assert decided.state == "rejected" and "adds risk" in decided.reasons[-1]


def test_pending_and_unapplied_directives_expire_when_the_run_ends() -> None:
    h = Harness(config())
    pending = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    approved = h.queue.propose_raw({"gradient_clip_norm": 0.5}, "rules")
    h.queue.approve(approved.directive.id)
    assert h.queue.end_run("run completed: the trainer reached its target step") == 2
    for entry in (pending, approved):
        assert entry.state == "expired"
        assert entry.reasons[-1] == (
            "expired: the run ended before it was applied "
            "(run completed: the trainer reached its target step)"
        )
    decided = [d["directive"] for d in h.of("directive_decided") if d["directive"]["state"] == "expired"]
    assert {d["id"] for d in decided} == {pending.directive.id, approved.directive.id}
    with pytest.raises(DirectiveError, match="can no longer be decided: expired: the run ended"):
        h.queue.approve(pending.directive.id)
    with pytest.raises(DirectiveError, match="can no longer be decided"):
        h.queue.clamp(approved.directive.id, {"gradient_clip_norm": 0.4})


def test_a_proposal_after_the_run_ended_is_rejected() -> None:
    h = Harness(config())
    h.queue.end_run("run stopped")
    late = h.queue.propose_raw({"lr_multiplier": 0.5}, "operator")
    assert late.state == "rejected" and late.reasons[0] == "the run has ended (run stopped)"
    with pytest.raises(DirectiveError, match="is rejected, not pending"):
        h.queue.approve(late.directive.id)


def test_a_restarted_trainer_gets_the_unapplied_ones_or_they_expire_by_ttl() -> None:
    h = Harness(config(ttl_s=100.0))
    old = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    h.queue.approve(old.directive.id)
    h.now += 60
    fresh = h.queue.propose_raw({"gradient_clip_norm": 0.5}, "rules")
    h.queue.approve(fresh.directive.id)
    h.sent.clear()  # the first trainer died before applying either
    h.now += 50  # old is past its TTL, fresh is not
    h.queue.trainer_connected()
    assert [m.directive_id for m in h.sent] == [fresh.directive.id]
    assert old.state == "expired" and "TTL" in old.reasons[-1]
    (carried,) = h.of("directives_carried")
    assert carried == {"kept": [fresh.directive.id], "expired": [old.directive.id]}
    h.echo_all(step=7)
    assert fresh.state == "applied"


def test_an_applied_directive_gets_its_effect_from_the_steps_around_it() -> None:
    h = Harness(config(effect_steps=10))
    for step in range(1, 11):
        h.queue.on_step(sample(step, loss=3.0 - 0.01 * step, tokens_per_s=100.0, mem_step_peak=1000))
    entry = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    h.queue.approve(entry.directive.id)
    h.echo_all(step=10)
    for step in range(11, 21):
        assert not h.of("directive_effect")
        h.queue.on_step(sample(step, loss=2.9, tokens_per_s=120.0, overflow=step == 15, mem_step_peak=2000))
    (measured,) = h.of("directive_effect")
    effect = measured["effect"]
    assert effect["applied_step"] == 10 and effect["steps"] == 10
    assert effect["before"]["loss_slope"] == pytest.approx(-0.01)
    assert effect["after"]["loss_slope"] == pytest.approx(0.0)
    assert (effect["before"]["tokens_per_s"], effect["after"]["tokens_per_s"]) == (100.0, 120.0)
    assert (effect["before"]["overflows"], effect["after"]["overflows"]) == (0, 1)
    assert (effect["before"]["mem_peak"], effect["after"]["mem_peak"]) == (1000, 2000)
    assert measured["directive"]["effect"] == effect and entry.view().effect is not None
    message = next(e.message for e in h.events if e.type == "directive_effect")
    assert "loss slope -1.00e-02 -> +0.00e+00/step" in message and "tokens/s 100 -> 120" in message


def test_chaos_injected_while_a_directive_is_measured_is_named_in_its_effect() -> None:
    """An lr cut approved, then a NaN injection in its after-window: the overflows it made
    are named as the chaos's, not put on the directive; chaos settled before the windows is not."""
    from engine.events import ChaosInjected, ChaosRecovered
    from tests.fakes.run_script import make_event

    h = Harness(config(effect_steps=10))
    early = ChaosInjected(chaos_id="c-early", kind="slow_steps", params={}, source="operator", step=1)
    h.queue.on_event(make_event(1, early))
    for step in range(1, 21):  # the before-window will be steps 11-20
        h.queue.on_step(sample(step, loss=3.0, tokens_per_s=100.0))
        if step == 2:  # its verdict: it touched step 2 only, long before the before-window
            settled = ChaosRecovered(chaos_id="c-early", kind="slow_steps", recovered=True, seconds=1.0)
            h.queue.on_event(make_event(2, settled))
    entry = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    h.queue.approve(entry.directive.id)
    h.echo_all(step=20)
    nan = ChaosInjected(chaos_id="c-nan1", kind="nan_loss", params={}, source="operator", step=23)
    for step in range(21, 31):
        if step == 24:
            h.queue.on_event(make_event(3, nan))
        h.queue.on_step(sample(step, loss=2.9, tokens_per_s=100.0, overflow=step in (24, 25, 26)))
    (measured,) = h.of("directive_effect")
    assert measured["effect"]["chaos"] == ["c-nan1 nan_loss"]
    assert measured["effect"]["after"]["overflows"] == 3  # still counted, and attributed
    message = next(e.message for e in h.events if e.type == "directive_effect")
    assert message.endswith("; chaos injected meanwhile, not the directive's doing: c-nan1 nan_loss")

    reacting = h.queue.propose_raw({"gradient_clip_norm": 0.5}, "rules")  # c-nan1 has no verdict yet
    assert reacting.reasons[-1] == "proposed while injected chaos was in effect: c-nan1 nan_loss"
    settled = ChaosRecovered(chaos_id="c-nan1", kind="nan_loss", recovered=True, seconds=2.0, step=27)
    h.queue.on_event(make_event(4, settled))
    later = h.queue.propose_raw({"gradient_clip_norm": 0.6}, "rules")
    assert not any("injected chaos" in reason for reason in later.reasons)


def test_a_pending_directive_expires_once_the_steps_make_it_stale_and_its_view_says_when() -> None:
    """The policy refuses an approval of a directive based on telemetry over
    ``max_staleness_steps`` old: on a fast run that comes long before the TTL, and a pending
    directive that can only be refused must not stay on offer."""
    h = Harness(config(max_staleness_steps=100))
    entry = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    based_on = entry.directive.step
    assert entry.view().stale_after_step == based_on + 100
    h.queue.on_step(sample(step=based_on + 100))  # at the limit: an approval would still pass
    assert entry.state == "pending"
    h.queue.on_step(sample(step=based_on + 101))
    assert entry.state == "expired"
    assert entry.reasons[-1] == (
        f"expired: stale: based on step {based_on}, 101 steps behind step {based_on + 101}, "
        "before an operator decided"
    )
    (decided,) = [d["directive"] for d in h.of("directive_decided")]
    assert decided["state"] == "expired" and decided["stale_after_step"] == based_on + 100
    with pytest.raises(DirectiveError, match="can no longer be decided: expired: stale"):
        h.queue.approve(entry.directive.id)
