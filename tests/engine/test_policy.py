"""The zero-trust policy: the edge refuses hostile directives naming the field; nothing
outside the bounds ever passes; verdicts are deterministic audit records."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.config_file import build_run_config
from engine.directives.directive import DirectiveRefused, draft, parse_directive
from engine.directives.policy import LocalPolicyEngine, MemoryFigures, PolicyContext
from engine.domain import DIRECTIVE_FIELDS

NOW = 1_000_000.0
CONFIG = build_run_config(
    {"train": {"micro_batch": 8, "global_batch": 64}, "memory": {"max_micro_batch": 64}}
)
UNLIMITED = CONFIG.model_copy(update={"policy": CONFIG.policy.model_copy(update={"rate_limit": 10_000})})
MIB = 1 << 20


def make(values: dict[str, Any], **over: Any) -> Any:
    fields = {"source": "rules", "step": 10, "ttl_s": 60.0, "now": NOW, **over}
    return draft(values, **fields)


def context(**over: Any) -> PolicyContext:
    memory = MemoryFigures(micro_batch=8, predicted_peak=100 * MIB, budget=1000 * MIB)
    return PolicyContext(**{"now": NOW + 1, "step": 12, "loss_scale": 4096.0, "memory": memory, **over})


def test_defaults_follow_the_mem_v3_write_up() -> None:
    bounds = LocalPolicyEngine(CONFIG).bounds
    assert bounds["lr_multiplier"][1] == 0.85
    assert bounds["gradient_clip_norm"][1] == 1.25
    assert bounds["loss_scale_initial_power"][1] == 10
    assert all(low > 0 for low, _ in bounds.values())


def test_allow_clamp_and_reasons_per_field() -> None:
    engine = LocalPolicyEngine(CONFIG)
    allowed = engine.evaluate(make({"lr_multiplier": 0.5}), context())
    assert allowed.decision == "allow" and allowed.patch == {"lr_multiplier": 0.5}
    clamped = engine.evaluate(make({"lr_multiplier": 2.0, "gradient_clip_norm": 5.0}), context())
    assert clamped.decision == "clamp"
    assert clamped.patch == {"lr_multiplier": 0.85, "gradient_clip_norm": 1.25}
    assert any("lr_multiplier" in r for r in clamped.reasons)
    assert any("gradient_clip_norm" in r for r in clamped.reasons)
    assert clamped.policy_revision == engine.revision and clamped.decision_id != allowed.decision_id


def test_rejections_name_their_cause() -> None:
    engine = LocalPolicyEngine(UNLIMITED)

    def reason(directive: Any, ctx: PolicyContext) -> str:
        verdict = engine.evaluate(directive, ctx)
        assert verdict.decision == "reject" and not verdict.patch
        return verdict.reasons[0]

    assert "expired" in reason(make({"lr_multiplier": 0.5}), context(now=NOW + 61))
    assert "stale" in reason(make({"lr_multiplier": 0.5}), context(step=10_000))
    assert "floor" in reason(make({"lr_multiplier": 0.5}), context(loss_scale=1.0))
    assert "thermal" in reason(make({"lr_multiplier": 0.5}), context(problems=("thermal throttling",)))
    assert "nothing to change" in reason(make({}), context())
    assert "bf16" in reason(make({"loss_scale_initial_power": 8}), context(precision="bf16"))
    # 64 does not fit: proportional prediction 800 MiB is over (warn - hysteresis) x 1000 MiB
    assert "predicted to peak" in reason(make({"micro_batch_size": 64}), context())
    assert "not one of" in reason(make({"micro_batch_size": 3}), context())
    assert engine.evaluate(make({"micro_batch_size": 4}), context()).decision == "allow"
    assert "no memory figures" in reason(make({"micro_batch_size": 4}), context(memory=None))


def test_loss_scale_floor_is_the_runs_configured_one() -> None:
    alerts = UNLIMITED.alerts.model_copy(update={"loss_scale_floor": 64.0})
    engine = LocalPolicyEngine(UNLIMITED.model_copy(update={"alerts": alerts}))
    at_floor = engine.evaluate(make({"lr_multiplier": 0.5}), context(loss_scale=64.0))
    assert at_floor.decision == "reject" and "loss scale at its floor (64)" in at_floor.reasons[0]
    assert engine.evaluate(make({"lr_multiplier": 0.5}), context(loss_scale=128.0)).admitted
    # the default floor (1.0) lets the same scale through
    assert (
        LocalPolicyEngine(UNLIMITED).evaluate(make({"lr_multiplier": 0.5}), context(loss_scale=64.0)).admitted
    )
    assert engine.revision != LocalPolicyEngine(UNLIMITED).revision  # the floor is part of what it judges by


def test_rate_limit_per_source() -> None:
    engine = LocalPolicyEngine(CONFIG)
    limit = CONFIG.policy.rate_limit
    verdicts = [engine.evaluate(make({"lr_multiplier": 0.5}), context()) for _ in range(limit + 3)]
    assert [v.rate_limited for v in verdicts] == [False] * limit + [True] * 3
    other = engine.evaluate(make({"lr_multiplier": 0.5}, source="operator"), context())
    assert other.decision == "allow"
    later = engine.evaluate(make({"lr_multiplier": 0.5}, now=NOW + 100), context(now=NOW + 101))
    assert later.decision == "allow"  # the window slid


def test_same_inputs_same_verdict() -> None:
    a, b = LocalPolicyEngine(CONFIG), LocalPolicyEngine(CONFIG)
    directive = make({"lr_multiplier": 3.0, "micro_batch_size": 4})
    assert a.evaluate(directive, context()) == b.evaluate(directive, context())


def test_operator_recheck_refuses_out_of_bounds_instead_of_moving_it() -> None:
    engine = LocalPolicyEngine(CONFIG)
    directive = make({"lr_multiplier": 0.5})
    assert engine.recheck(directive, {"lr_multiplier": 0.6}, context()).patch == {"lr_multiplier": 0.6}
    refused = engine.recheck(directive, {"lr_multiplier": 0.9}, context())
    assert refused.decision == "reject" and "lr_multiplier" in refused.reasons[0]


HOSTILE = [
    ("lr_multiplier", math.nan),
    ("lr_multiplier", math.inf),
    ("lr_multiplier", -math.inf),
    ("lr_multiplier", -1),
    ("lr_multiplier", 1e308),
    ("lr_multiplier", "0.5"),
    ("lr_multiplier", {"value": 0.5}),
    ("lr_multiplier", [0.5]),
    ("lr_multiplier", True),
    ("gradient_clip_norm", -1.0),
    ("gradient_clip_norm", 1e308),
    ("loss_scale_initial_power", 2.5),
    ("loss_scale_initial_power", 1e308),
    ("micro_batch_size", -1),
    ("micro_batch_size", "8"),
    ("micro_batch_size", None.__class__),
    ("temperature", 0.7),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE)
def test_hostile_values_refused_at_the_edge_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(DirectiveRefused) as err:
        make({field: value})
    assert err.value.field == field


def test_hostile_envelopes_refused() -> None:
    with pytest.raises(DirectiveRefused) as err:
        make({"lr_multiplier": 0.5}, rationale="x" * 10_000_000)  # 10 MB
    assert err.value.field == "rationale"
    for raw in ([], "directive", 3, None):
        with pytest.raises(DirectiveRefused):
            parse_directive(raw)
    with pytest.raises(DirectiveRefused):
        parse_directive({f"k{i}": i for i in range(1000)})
    good = make({"lr_multiplier": 0.5}).model_dump()
    with pytest.raises(DirectiveRefused) as err:
        parse_directive({**good, "nested": {"lr_multiplier": 5}})
    assert err.value.field == "nested"
    with pytest.raises(DirectiveRefused) as err:
        parse_directive({**good, "created_at": math.nan})
    assert err.value.field == "created_at"


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.text(max_size=5),
    st.none(),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(DIRECTIVE_FIELDS), numbers, max_size=4))
def test_property_nothing_outside_bounds_ever_passes(values: dict[str, Any]) -> None:
    engine = LocalPolicyEngine(CONFIG)
    try:
        directive = make({k: v for k, v in values.items() if v is not None})
    except DirectiveRefused:
        return
    verdict = engine.evaluate(directive, context())
    for name, value in verdict.patch.items():
        low, high = engine.bounds[name]
        assert math.isfinite(value) and low <= value <= high
    if verdict.decision == "reject":
        assert not verdict.patch and verdict.reasons


def test_a_micro_batch_is_judged_against_the_room_above_the_baseline() -> None:
    """600 MiB of the 1000 MiB budget is baseline (torch, DeepSpeed, model states): 8 uses 50
    of it, so 16 needs 100 of the 400 MiB room and fits. Scaled as a whole (the figures
    without a baseline) 16 would be predicted at 1300 MiB and refused."""
    engine = LocalPolicyEngine(UNLIMITED)
    with_baseline = MemoryFigures(
        micro_batch=8, predicted_peak=650 * MIB, budget=1000 * MIB, baseline=600 * MIB
    )
    assert with_baseline.predict(16) == 700 * MIB
    assert engine.evaluate(make({"micro_batch_size": 16}), context(memory=with_baseline)).decision == "allow"
    whole = MemoryFigures(micro_batch=8, predicted_peak=650 * MIB, budget=1000 * MIB)
    refused = engine.evaluate(make({"micro_batch_size": 16}), context(memory=whole))
    assert refused.decision == "reject" and "predicted to peak" in refused.reasons[0]
    # The limit is a share of the room too: 64 needs 400 MiB of it, over warn - hysteresis.
    too_big = engine.evaluate(make({"micro_batch_size": 64}), context(memory=with_baseline))
    assert too_big.decision == "reject"
    assert f"of the usable room ({400 * MIB} bytes of a budget of {1000 * MIB})" in too_big.reasons[0]
