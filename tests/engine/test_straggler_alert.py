"""The straggler rule: a rank whose own step time stays above the ranks' median is named,
once, and cleared after as many reports back (hysteresis)."""

from __future__ import annotations

import pytest

from engine.alerts import rules as alert_rules
from engine.alerts.rules import AlertRules
from engine.config.run_config import AlertConfig
from engine.domain import RankMemory, TelemetrySample
from tests.engine.test_alert_rules import sample


def report(step: int, *step_s: float | None) -> TelemetrySample:
    ranks = [
        RankMemory(rank=r, allocated=1, reserved=2, peak=2, capacity=10, step_s=s)
        for r, s in enumerate(step_s)
    ]
    return sample(step, ranks=ranks)


def stragglers(rules: AlertRules, s: TelemetrySample, now: float) -> list[tuple[str, bool, int]]:
    alerts = rules.on_step(s, now)
    return [(a.rule, a.resolved, a.data["rank"]) for a in alerts if a.rule.startswith("straggler")]


def test_a_rank_slow_for_three_reports_is_named_once_and_cleared_after_as_many_back() -> None:
    rules = AlertRules(AlertConfig(straggler_slower=0.25, throttle_s=0.0))  # STRAGGLER_REPORTS, 3
    slow = [stragglers(rules, report(10 * i, 0.1, 0.3, 0.1), float(i)) for i in range(1, 6)]
    assert slow == [[], [], [("straggler.1", False, 1)], [], []]
    back = [stragglers(rules, report(100 + i, 0.1, 0.1, 0.1), 10.0 + i) for i in range(3)]
    assert back == [[], [], [("straggler.1", True, 1)]]


def test_a_rank_hovering_at_the_threshold_does_not_flap_and_untimed_reports_are_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(alert_rules, "STRAGGLER_REPORTS", 2)
    config = AlertConfig(straggler_slower=0.25, hysteresis=0.05, throttle_s=0.0)
    rules = AlertRules(config)
    # rank 1 at 1.5x the median, then hovering between the clear level and the threshold
    fired = [stragglers(rules, report(i, 0.1, 0.15, 0.1), float(i)) for i in range(2)]
    hover = [stragglers(rules, report(10 + i, 0.1, 0.123, 0.1), 10.0 + i) for i in range(4)]
    untimed = stragglers(rules, report(20, None, None), 20.0) + stragglers(rules, sample(21), 21.0)
    assert fired[-1] == [("straggler.1", False, 1)] and hover == [[]] * 4 and untimed == []


def test_the_alert_message_names_the_rank_and_its_share_above_the_median(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(alert_rules, "STRAGGLER_REPORTS", 1)
    rules = AlertRules(AlertConfig())
    (alert,) = [a for a in rules.on_step(report(5, 0.2, 0.4), 1.0) if a.rule.startswith("straggler")]
    assert alert.rule == "straggler.1" and "rank 1 is a straggler" in alert.message
    assert "33% above the ranks' median 0.300 s" in alert.message
