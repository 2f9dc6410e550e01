"""The fragmentation alert: the allocator's inactive split bytes as a share of its reserved
bytes, judged over consecutive steps with hysteresis, fed made-up samples."""

from __future__ import annotations

import pytest

from engine.alerts import rules as alert_rules
from engine.alerts.rules import AlertRules
from engine.config.run_config import AlertConfig, RunConfig
from tests.engine.test_alert_rules import rules_of, sample

GIB = 1 << 30
CFG = AlertConfig(throttle_s=0.0, fragmentation_share=0.3, hysteresis=0.05)


@pytest.fixture(autouse=True)
def three_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three steps in a row make a pattern here (the rules' own count is 20)."""
    monkeypatch.setattr(alert_rules, "FRAGMENTATION_STEPS", 3)


def fed(shares: list[float | None]) -> list[str]:
    """The alerts for one step per share (None: no CUDA reading), reserved 10 GiB."""
    rules, out = AlertRules(CFG), []
    for t, share in enumerate(shares):
        fragmented = None if share is None else int(share * 10 * GIB)
        step = sample(t + 1, mem_reserved=10 * GIB, mem_capacity=80 * GIB, mem_fragmentation=fragmented)
        out += [a for a in rules.on_step(step, float(t)) if a.rule == "memory_fragmentation"]
    return rules_of(out)


def test_fires_after_the_steps_in_a_row_and_clears_below_the_margin() -> None:
    # two high steps are no trend; three are. 0.27 is under the share but within the margin:
    # still firing; three steps under 0.25 clear it.
    shares = [0.1, 0.4, 0.4, 0.1, 0.35, 0.31, 0.30, 0.27, 0.27, 0.27, 0.2, 0.2, 0.2]
    assert fed(shares) == ["memory_fragmentation:firing", "memory_fragmentation:resolved"]


def test_hovering_at_the_threshold_fires_once() -> None:
    assert fed([0.31, 0.30, 0.32, 0.29, 0.31, 0.30, 0.28] * 5) == ["memory_fragmentation:firing"]


def test_the_cpu_reports_no_fragmentation_and_nothing_fires() -> None:
    assert fed([None] * 10) == []


def test_the_alert_names_its_figures() -> None:
    rules = AlertRules(CFG)
    alerts = []
    for t in range(3):
        step = sample(t + 1, mem_reserved=10 * GIB, mem_fragmentation=5 * GIB)
        alerts += rules.on_step(step, float(t))
    fired = [a for a in alerts if a.rule == "memory_fragmentation"]
    assert fired[0].data == {"share": 0.5, "fragmented": 5 * GIB, "reserved": 10 * GIB, "step": 3}
    assert "50% of the reserved bytes" in fired[0].message and fired[0].severity == "warning"


def test_the_threshold_is_in_the_run_config() -> None:
    alerts = RunConfig.model_validate({"alerts": {"fragmentation_share": 0.5}}).alerts
    assert alerts.fragmentation_share == 0.5
