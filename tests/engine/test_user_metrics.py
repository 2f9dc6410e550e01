"""The screen a workload's own scalars pass: limits, non-numbers, one warning per drop."""

from __future__ import annotations

from engine.measures.user_metrics import MAX_METRICS, MAX_NAME_CHARS, MetricScreen


def screened(*batches: dict[object, object]) -> tuple[list[dict[str, float]], list[str]]:
    warnings: list[str] = []
    screen = MetricScreen(warnings.append)
    return [screen.screen(b) for b in batches], warnings


def test_finite_numbers_under_identifier_names_are_kept_as_floats() -> None:
    [kept], warnings = screened({"accuracy": 0.5, "tokens/s": 3, "eval.ppl": 12.25})
    assert kept == {"accuracy": 0.5, "tokens/s": 3.0, "eval.ppl": 12.25}
    assert all(type(v) is float for v in kept.values())
    assert warnings == []


def test_each_bad_value_is_dropped_with_one_warning_per_name_and_reason() -> None:
    bad = {"nan": float("nan"), "inf": float("inf"), "text": "high", "flag": True, "ok": 1.0}
    kept, warnings = screened(bad, bad, bad)
    assert kept == [{"ok": 1.0}] * 3
    assert len(warnings) == 4  # four names, warned once each over three steps
    assert any("'text'" in w and "str" in w for w in warnings)
    assert any("'nan'" in w and "not finite" in w for w in warnings)


def test_names_past_the_limit_or_too_long_are_dropped_and_the_first_ones_kept() -> None:
    many = {f"m{i}": float(i) for i in range(MAX_METRICS + 3)}
    [kept, again], warnings = screened(many, {"m0": 9.0, "new": 1.0})
    assert list(kept) == [f"m{i}" for i in range(MAX_METRICS)]
    assert again == {"m0": 9.0}  # a known name still passes; a new one does not
    assert len(warnings) == 4 and all(f"more than {MAX_METRICS}" in w for w in warnings)
    [kept], warnings = screened({"x" * (MAX_NAME_CHARS + 1): 1.0, "1st": 2.0, 3: 4.0})
    assert kept == {} and len(warnings) == 3
