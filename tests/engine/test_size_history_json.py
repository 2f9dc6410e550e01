"""The controller's measured history survives a trainer restart through memory.json: what
``SizeHistory.as_json`` writes ``from_json`` reads back, and a malformed file is refused
naming its field (the attempt then starts without it, never with half of it)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.memory.size_history import RATE_WINDOW, SizeHistory

ALLOWED = (1, 2, 4, 8, 16, 32, 64)

sizes = st.sampled_from(ALLOWED)
rates = st.lists(st.floats(min_value=0.1, max_value=1e6), min_size=1, max_size=RATE_WINDOW)
failures = st.tuples(st.integers(0, 10**9), st.integers(0, 2**40))


@given(
    st.dictionaries(sizes, rates),
    st.dictionaries(sizes, failures),
    st.dictionaries(sizes, st.integers(0, 10**9)),
)
def test_property_a_history_comes_back_as_it_was_written(
    measured: dict[int, list[float]], failed: dict[int, tuple[int, int]], when: dict[int, int]
) -> None:
    history = SizeHistory({m: tuple(r) for m, r in measured.items()}, failed, when)
    text = json.dumps(history.as_json())  # through the file's text, as a restart reads it
    again = SizeHistory.from_json(json.loads(text), ALLOWED)
    assert again == history
    for m in measured:
        assert again.rate(m) == history.rate(m)


def test_sizes_the_geometry_no_longer_allows_are_dropped() -> None:
    history = SizeHistory({16: (90.0, 91.0, 92.0), 24: (80.0,)}, {32: (40, 1000)})
    again = SizeHistory.from_json(history.as_json(), (8, 16))
    assert again.rates == {16: (90.0, 91.0, 92.0)} and again.failures == {}


def test_a_file_from_before_measured_steps_has_no_size_fresh_enough_to_compare() -> None:
    old = {"rates": {"8": [100.0, 101.0, 99.0], "16": [50.0, 51.0, 49.0]}, "failures": {}}
    history = SizeHistory.from_json(old, ALLOWED)
    assert history.rate(8) == 100.0 and history.measured == {}
    assert not history.faster(8, 16, 0.05, step=10)


def test_only_the_newest_rates_are_kept() -> None:
    data = {"rates": {"16": [float(i + 1) for i in range(3 * RATE_WINDOW)]}, "failures": {}}
    kept = SizeHistory.from_json(data, ALLOWED).rates[16]
    assert len(kept) == RATE_WINDOW and kept[-1] == 3 * RATE_WINDOW


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([], "history"),
        ({"rates": []}, "history.rates"),
        ({"rates": {"x": [1.0]}}, "history.rates"),
        ({"rates": {"16": [1.0, -2.0]}}, "history.rates.16"),
        ({"rates": {"16": [float("nan")]}}, "history.rates.16"),
        ({"rates": {"16": [True]}}, "history.rates.16"),
        ({"failures": {"32": [1]}}, "history.failures.32"),
        ({"failures": {"32": [1.5, 2]}}, "history.failures.32"),
        ({"failures": "32"}, "history.failures"),
    ],
)
def test_a_malformed_history_is_refused_naming_the_field(data: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        SizeHistory.from_json(data, ALLOWED)
