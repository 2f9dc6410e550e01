"""The built-in rule planner: each rule fires on its condition, with a rationale, once per cool-down."""

from __future__ import annotations

from typing import Any

import planner_samples

from engine.config_file import build_run_config
from engine.directives.planners.rules import COOLDOWN_STEPS, RulePlanner
from engine.domain import TelemetrySample

CONFIG = build_run_config({})


def sample(step: int, **over: Any) -> TelemetrySample:
    """The shared sample at micro-batch 4 x 2 with a grad norm, and no memory figures."""
    base = {"grad_norm": 1.0, "micro_batch": 4, "grad_accum": 2, "mem_predicted": None, "mem_budget": None}
    return planner_samples.sample(step, **{**base, **over})


def feed(planner: RulePlanner, n: int, start: int = 1, **over: Any) -> list:
    out = []
    for step in range(start, start + n):
        out += planner.observe(sample(step, **over), {})
    return out


def test_quiet_telemetry_suggests_nothing() -> None:
    assert feed(RulePlanner(CONFIG), 200) == []


def test_loss_spike_halves_the_lr_multiplier_once_per_cooldown() -> None:
    planner = RulePlanner(CONFIG)
    feed(planner, 20)
    first = planner.observe(sample(21, loss=50.0), {"lr_multiplier": 0.8})
    assert first[0][0] == {"lr_multiplier": 0.4} and "loss" in first[0][1]
    assert planner.observe(sample(22, loss=float("nan")), {}) == []  # cooling down
    later = planner.observe(sample(21 + COOLDOWN_STEPS, loss=float("inf")), {})
    assert later and "lr_multiplier" in later[0][0]


def test_overflows_gradients_and_headroom() -> None:
    planner = RulePlanner(CONFIG)
    feed(planner, 20)
    overflow = feed(planner, 3, start=21, overflow=True, loss_scale=1024.0)
    assert overflow[0][0] == {"loss_scale_initial_power": 9}
    grads = planner.observe(sample(30, grad_norm=500.0), {})
    assert grads[0][0] == {"gradient_clip_norm": 0.5}
    roomy = RulePlanner(CONFIG)
    suggestions = feed(roomy, 60, mem_step_peak=10, mem_budget=1000)
    assert suggestions[0][0] == {"micro_batch_size": 8} and "budget" in suggestions[0][1]
