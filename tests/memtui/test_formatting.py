from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtui.formatting import (
    PLACEHOLDER,
    format_age,
    format_bytes,
    format_count,
    format_duration,
    format_float,
    format_percent,
    format_rate,
    format_scale,
)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.50 KiB"),
        (300 * 2**20, "300 MiB"),
        (45.5 * 2**20, "45.5 MiB"),
        (3 * 2**30, "3.00 GiB"),
        (80 * 2**30, "80.0 GiB"),
        (2**50, "1.00 PiB"),
        (None, PLACEHOLDER),
    ],
)
def test_bytes(n: float | None, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(
    ("s", "text"),
    [
        (0.042, "42ms"),
        (2.5, "2.5s"),
        (42, "42s"),
        (125, "2m05s"),
        (3725, "1h02m"),
        (2 * 86400 + 3 * 3600, "2d03h"),
        (None, PLACEHOLDER),
        (math.inf, PLACEHOLDER),
    ],
)
def test_duration(s: float | None, text: str) -> None:
    assert format_duration(s) == text


def test_age() -> None:
    assert format_age(3) == "3.0s ago"
    assert format_age(None) == "never"
    assert format_age(0.4) == format_age(-1) == "just now"  # clock skew never shows a negative age


def test_rates_counts_floats() -> None:
    assert format_rate(20_480.0) == "20.5k tok/s"
    assert format_rate(12.0, "step") == "12 step/s"
    assert format_rate(None) == PLACEHOLDER
    assert format_count(999) == "999"
    assert format_count(1_234_567) == "1.23M"
    assert format_float(5.4321) == "5.432"
    assert format_float(3e-4) == "3.000e-04"
    assert format_float(float("nan")) == "nan"
    assert format_percent(0.4567) == "45.7%"
    assert format_scale(4096.0) == "4096 (2^12)"
    assert format_scale(3.5) == "3.5"
    assert format_scale(None) == PLACEHOLDER


@given(st.floats(allow_nan=True, allow_infinity=True) | st.none())
def test_every_formatter_takes_any_float(x: float | None) -> None:
    for fn in (
        format_bytes,
        format_duration,
        format_age,
        format_count,
        format_rate,
        format_float,
        format_percent,
        format_scale,
    ):
        assert isinstance(fn(x), str)


@given(st.integers(min_value=0, max_value=2**62))
def test_bytes_stay_short(n: int) -> None:
    assert len(format_bytes(n)) <= 10
