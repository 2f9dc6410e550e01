"""The built-in rule planner: each rule fires on its condition, with a rationale and its
evidence, once per cool-down; it suggests only values the policy could allow (bounds,
batch geometry, memory) and never a value once rejected."""

from __future__ import annotations

from typing import Any

import planner_samples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config.config_file import build_run_config
from engine.directives.context import judging_context
from engine.directives.directive import draft
from engine.directives.planners.rules import COOLDOWN_STEPS, PLATEAU_STEPS, RulePlanner
from engine.directives.policy import LocalPolicyEngine
from engine.domain import DirectiveField, DirectiveValue, TelemetrySample
from engine.memory.controller import Policy as MemoryPolicy

CONFIG = build_run_config({})
MIB = 1 << 20


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
    quiet = RulePlanner(CONFIG)
    assert [s for s in feed(quiet, 200, loss=2.0) if "plateau" not in s.rationale] == []


def test_loss_spike_halves_the_lr_multiplier_once_per_cooldown() -> None:
    planner = RulePlanner(CONFIG)
    feed(planner, 20)
    first = planner.observe(sample(21, loss=50.0), {"lr_multiplier": 0.8})
    assert first[0].values == {"lr_multiplier": 0.4} and "loss" in first[0].rationale
    assert any("loss 50 at step 21" in line for line in first[0].evidence)
    assert planner.observe(sample(22, loss=float("nan")), {}) == []  # cooling down
    later = planner.observe(sample(21 + COOLDOWN_STEPS, loss=float("inf")), {})
    assert later and "lr_multiplier" in later[0].values


def test_overflows_gradients_and_headroom() -> None:
    planner = RulePlanner(CONFIG)
    feed(planner, 20)
    overflow = feed(planner, 3, start=21, overflow=True, loss_scale=1024.0)
    assert overflow[0].values == {"loss_scale_initial_power": 9}
    assert "3 overflows in 23 steps" in overflow[0].evidence
    grads = planner.observe(sample(30, grad_norm=500.0), {})
    assert grads[0].values == {"gradient_clip_norm": 0.5}
    roomy = RulePlanner(CONFIG)
    suggestions = feed(roomy, 60, mem_step_peak=10, mem_predicted=10, mem_budget=1000)
    assert suggestions[0].values == {"micro_batch_size": 8} and "headroom" in suggestions[0].rationale
    assert any("global batch 8" in line for line in suggestions[0].evidence)


def test_a_plateau_lowers_the_learning_rate_with_its_slope_as_evidence() -> None:
    planner = RulePlanner(CONFIG)
    start = CONFIG.train.warmup_steps + 1
    out = feed(planner, PLATEAU_STEPS + 1, start=start, loss=2.0)
    (plateau,) = out
    assert plateau.values == {"lr_multiplier": 0.7}
    assert plateau.evidence[0].startswith("loss slope +0/step over the last 200 steps")
    assert plateau.evidence[1] == "0.0% of the mean loss 2 gained (plateau: under 3.0%)"
    slow = RulePlanner(CONFIG)  # 2% per window: a plateau at the full LR, not at half of it
    slowly = [sample(step, loss=2.0 - 0.0002 * step) for step in range(start, start + PLATEAU_STEPS + 1)]
    assert [s.values for s in [x for t in slowly for x in slow.observe(t, {})]] == [{"lr_multiplier": 0.7}]
    halved = RulePlanner(CONFIG)
    assert [x for t in slowly for x in halved.observe(t, {"lr_multiplier": 0.5})] == []
    floor = RulePlanner(CONFIG)
    flat = [sample(step, loss=2.0) for step in range(start, start + PLATEAU_STEPS + 1)]
    assert [x.values for t in flat for x in floor.observe(t, {"lr_multiplier": 0.6})] == [
        {"lr_multiplier": 0.5}
    ]
    assert [x for t in flat for x in RulePlanner(CONFIG).observe(t, {"lr_multiplier": 0.5})] == []
    falling = RulePlanner(CONFIG)
    for step in range(start, start + PLATEAU_STEPS + 50):
        assert falling.observe(sample(step, loss=5.0 - 0.01 * step), {}) == []  # still learning


def test_the_scale_power_stays_in_bounds_and_below_the_scale_in_use() -> None:
    planner = RulePlanner(CONFIG)  # bounds [1, 10]; tiny starts at 2**12
    out = feed(planner, 3, overflow=True, loss_scale=4096.0)
    assert out[0].values == {"loss_scale_initial_power": 10}
    at_floor = RulePlanner(CONFIG)
    assert feed(at_floor, 3, overflow=True, loss_scale=2.0) == []  # 2**1 is already the lowest


def test_no_larger_micro_batch_when_the_global_batch_does_not_allow_one() -> None:
    planner = RulePlanner(CONFIG)  # global batch 8, one rank: 8 is the largest
    roomy = {"mem_step_peak": 10, "mem_predicted": 10, "mem_budget": 1000}
    assert feed(planner, 200, micro_batch=8, grad_accum=1, **roomy) == []


def test_a_rejected_value_is_never_suggested_again() -> None:
    planner = RulePlanner(CONFIG)
    feed(planner, 20)
    (first,) = planner.observe(sample(21, loss=50.0), {})
    planner.refuse(first.values)
    assert planner.observe(sample(21 + COOLDOWN_STEPS, loss=50.0), {}) == []
    lower = planner.observe(sample(21 + COOLDOWN_STEPS, loss=50.0), {"lr_multiplier": 0.5})
    assert lower[0].values == {"lr_multiplier": 0.25}  # another value is fine


# ------------------------------------------------------------------ property

configs = st.builds(
    lambda ranks, per_rank_exp, micro_exp, lr_max, clip_max, power_max, mb_max: build_run_config(
        {
            "train": {
                "ranks": ranks,
                "micro_batch": 2**micro_exp,
                "global_batch": ranks * 2**per_rank_exp,
                "grad_clip": 1.0,
            },
            "memory": {"max_micro_batch": 2**per_rank_exp},
            "policy": {
                "lr_multiplier_max": lr_max,
                "gradient_clip_norm_max": clip_max,
                "loss_scale_initial_power_max": power_max,
                "micro_batch_size_max": mb_max,
                "rate_limit": 10_000,
            },
        }
    ),
    ranks=st.integers(1, 4),
    per_rank_exp=st.integers(3, 6),
    micro_exp=st.integers(0, 3),
    lr_max=st.floats(0.1, 2.0),
    clip_max=st.floats(0.1, 3.0),
    power_max=st.integers(1, 16),
    mb_max=st.integers(1, 64),
)

steps = st.lists(
    st.fixed_dictionaries(
        {
            "loss": st.one_of(st.floats(0.1, 10.0), st.sampled_from([float("nan"), float("inf"), 100.0])),
            "grad_norm": st.one_of(st.floats(0.01, 5.0), st.just(1000.0)),
            "overflow": st.booleans(),
            "loss_scale": st.sampled_from([4.0, 256.0, 4096.0, 65536.0]),
        }
    ),
    min_size=60,  # the headroom rule needs 50 steps
    max_size=300,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, steps, st.integers(0, 2**16), st.floats(0.05, 1.0), st.integers(1, 1000))
def test_no_suggestion_outside_the_bounds_or_the_geometry_nor_a_refused_one(
    config: Any, window: list[dict[str, Any]], seed: int, multiplier: float, peak: int
) -> None:
    planner = RulePlanner(config)
    micro = config.train.micro_batch
    grown = MemoryPolicy.from_config(config.memory, config.train, config.train.ranks).micro_batches()
    refused: dict[DirectiveField, set[DirectiveValue]] = {}
    effective = {"lr_multiplier": round(multiplier, 3)}
    for index, figures in enumerate(window):
        telemetry = planner_samples.sample(
            index + 1,
            micro_batch=micro,
            grad_accum=config.train.global_batch // (micro * config.train.ranks),
            world_size=config.train.ranks,
            mem_step_peak=peak,  # under 500 of 1000: steady headroom
            mem_predicted=100,
            mem_budget=1000,
            **figures,
        )
        for suggestion in planner.observe(telemetry, effective):
            for name, value in suggestion.values.items():
                low, high = config.policy.bounds()[name]
                assert low <= value <= high, (name, value)
                assert value not in refused.get(name, set()), (name, value)
                if name == "micro_batch_size":
                    assert value in grown and value > micro
            assert suggestion.evidence and suggestion.rationale
            context = judging_context(config, telemetry, effective, (), now=1000.0)
            directive = draft(suggestion.values, source="rules", step=telemetry.step, ttl_s=60, now=1000.0)
            assert LocalPolicyEngine(config).evaluate(directive, context).decision == "allow"
            if (seed >> (index % 16)) & 1:  # some are rejected: never seen again
                planner.refuse(suggestion.values)
                for name, value in suggestion.values.items():
                    refused.setdefault(name, set()).add(value)
