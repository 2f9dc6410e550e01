"""The memory controller's decisions, without torch: levels, hysteresis, cool-down,
bounds and the global-batch invariant (property tests with hypothesis)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.memory.controller import (
    ControllerState,
    Geometry,
    Policy,
    Reading,
    after_oom,
    decide,
    level_of,
    review_request,
)
from tests.engine.memory_policies import policy_of

GIB = 1 << 30
POLICY = policy_of(global_batch=32, min_micro_batch=1, max_micro_batch=16, steady_steps=3, cooldown_steps=5)


def linear(base: int, per_sample: int, policy: Policy = POLICY) -> dict[int, int]:
    return {m: base + per_sample * m for m in policy.micro_batches()}


def reading(step: int, peak: int, predicted: dict[int, int], budget: int = GIB) -> Reading:
    return Reading(step=step, peak=peak, budget=budget, predicted=predicted)


def test_micro_batches_divide_the_global_batch_within_bounds() -> None:
    assert POLICY.micro_batches() == [1, 2, 4, 8, 16]
    assert policy_of(global_batch=24, max_micro_batch=12, world_size=2).micro_batches() == [1, 2, 3, 4, 6, 12]
    assert policy_of(global_batch=12, min_micro_batch=5, max_micro_batch=12).micro_batches() == [6, 12]
    assert POLICY.geometry(4) == Geometry(4, 8)


def test_levels_have_hysteresis() -> None:
    assert level_of("ok", 0.84, POLICY) == "ok"
    assert level_of("ok", 0.85, POLICY) == "warn"
    assert level_of("warn", 0.81, POLICY) == "warn"  # above warn - hysteresis: stays
    assert level_of("warn", 0.79, POLICY) == "ok"
    assert level_of("warn", 0.96, POLICY) == "critical"
    assert level_of("critical", 0.91, POLICY) == "critical"
    assert level_of("critical", 0.89, POLICY) == "warn"


def test_warn_shrinks_to_the_largest_micro_batch_predicted_to_fit() -> None:
    predicted = linear(GIB // 2, GIB // 40)  # 16 -> 0.9, 8 -> 0.7, 4 -> 0.6
    state, change = decide(ControllerState(), Geometry(16, 2), reading(10, predicted[16], predicted), POLICY)
    assert change is not None and change.kind == "shrink" and change.after == Geometry(8, 4)
    assert state.level == "warn" and state.last_change_step == 10


def test_warn_waits_for_the_cool_down_but_critical_does_not() -> None:
    predicted = linear(GIB // 2, GIB // 40)
    state = ControllerState(level="warn", last_change_step=8)
    _, change = decide(state, Geometry(16, 2), reading(10, int(0.9 * GIB), predicted), POLICY)
    assert change is None
    _, change = decide(state, Geometry(16, 2), reading(10, int(0.97 * GIB), predicted), POLICY)
    assert change is not None and change.kind == "shrink"


def test_nothing_fits_goes_to_the_smallest_and_stays_there() -> None:
    predicted = linear(int(0.95 * GIB), 1000)
    _, change = decide(ControllerState(), Geometry(16, 2), reading(0, int(0.97 * GIB), predicted), POLICY)
    assert change is not None and change.after == Geometry(1, 32)
    _, change = decide(ControllerState(), Geometry(1, 32), reading(1, int(0.97 * GIB), predicted), POLICY)
    assert change is None


def test_grows_one_notch_after_steady_headroom_and_the_cool_down() -> None:
    predicted = linear(GIB // 4, GIB // 100)
    state, geometry = ControllerState(last_change_step=0), Geometry(2, 16)
    changes = []
    for step in range(1, 30):
        state, change = decide(
            state, geometry, reading(step, predicted[geometry.micro_batch], predicted), POLICY
        )
        if change:
            changes.append((step, change.after.micro_batch))
            geometry = change.after
    assert changes == [(5, 4), (10, 8), (15, 16)]  # cool-down 5 dominates steady 3; never above 16


def test_no_growth_without_headroom() -> None:
    predicted = linear(GIB // 2, GIB // 16)  # 4 -> 0.75: not below grow_below (0.7)
    state = ControllerState()
    for step in range(50):
        state, change = decide(state, Geometry(2, 16), reading(step, predicted[2], predicted), POLICY)
        assert change is None


def test_after_oom_halves_and_gives_up_at_the_minimum() -> None:
    assert after_oom(Geometry(16, 2), POLICY) == Geometry(8, 4)
    assert after_oom(Geometry(2, 16), POLICY) == Geometry(1, 32)
    assert after_oom(Geometry(1, 32), POLICY) is None
    odd = policy_of(global_batch=12, max_micro_batch=12, min_micro_batch=4)
    assert after_oom(Geometry(6, 2), odd) == Geometry(4, 3)  # no divisor <= 3 within bounds: next below


def test_review_request_refuses_what_would_not_fit() -> None:
    predicted = linear(GIB // 2, GIB // 40)
    assert review_request(8, predicted[8], GIB, POLICY).accepted
    refused = review_request(16, predicted[16], GIB, POLICY)
    assert not refused.accepted and "budget" in refused.reason
    assert not review_request(3, 0, GIB, POLICY).accepted  # does not divide 32
    assert not review_request(32, 0, GIB, POLICY).accepted  # above the maximum


@pytest.mark.slow
def test_module_is_torch_free() -> None:
    import subprocess

    code = (
        "import engine.memory.controller, engine.memory.model, engine.memory.budget, sys;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ------------------------------------------------------------------ properties

policies = st.builds(
    lambda per_rank, world, lo, hi, steady, cooldown: policy_of(
        global_batch=per_rank * world,
        world_size=world,
        min_micro_batch=lo,
        max_micro_batch=max(lo, hi),
        steady_steps=steady,
        cooldown_steps=cooldown,
    ),
    per_rank=st.sampled_from([1, 2, 6, 8, 12, 16, 24, 64]),
    world=st.integers(1, 4),
    lo=st.integers(1, 4),
    hi=st.integers(1, 64),
    steady=st.integers(1, 5),
    cooldown=st.integers(0, 10),
)


@settings(max_examples=300, deadline=None)
@given(policy=policies, data=st.data())
def test_property_bounds_cool_down_and_global_batch(policy: Policy, data: st.DataObject) -> None:
    allowed = policy.micro_batches()
    if not allowed:
        return
    geometry = policy.geometry(data.draw(st.sampled_from(allowed)))
    state = ControllerState()
    last_change: int | None = None
    steps = data.draw(st.integers(1, 60))
    for step in range(steps):
        base = data.draw(st.integers(0, GIB))
        per_sample = data.draw(st.integers(0, GIB // 8))
        predicted = {m: base + per_sample * m for m in allowed}
        peak = data.draw(st.sampled_from([predicted[geometry.micro_batch], base, int(1.2 * GIB)]))
        state, change = decide(state, geometry, reading(step, peak, predicted), policy)
        if change is None:
            continue
        assert change.before == geometry
        geometry = change.after
        assert geometry.micro_batch in allowed  # never outside its bounds
        assert geometry.samples(policy.world_size) == policy.global_batch  # never another product
        critical = change.kind == "shrink" and state.level == "critical"
        if last_change is not None and not critical:
            assert step - last_change >= policy.memory.cooldown_steps  # never faster than its cool-down
        if change.kind == "grow":
            assert change.after.micro_batch > change.before.micro_batch
        last_change = step


@settings(max_examples=200, deadline=None)
@given(policy=policies, data=st.data())
def test_property_after_oom_shrinks_within_bounds(policy: Policy, data: st.DataObject) -> None:
    allowed = policy.micro_batches()
    if not allowed:
        return
    geometry = policy.geometry(data.draw(st.sampled_from(allowed)))
    smaller = after_oom(geometry, policy)
    if geometry.micro_batch == allowed[0]:
        assert smaller is None
    else:
        assert smaller is not None and smaller.micro_batch < geometry.micro_batch
        assert smaller.micro_batch in allowed and smaller.samples(policy.world_size) == policy.global_batch
