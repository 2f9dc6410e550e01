"""The chaos kinds a run can be asked for: one request model each, specs a form is built
from, and bad input refused naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.chaos.kinds.memory import Ballast
from engine.chaos.kinds.slow_steps import SlowSteps
from engine.chaos.table import KINDS, chaos_specs, parse_request


def test_every_kind_has_a_spec_with_defaults_bounds_and_help() -> None:
    specs = {s.kind: s for s in chaos_specs()}
    assert list(specs) == list(KINDS)
    assert {s.performer for s in specs.values()} == {"supervisor", "trainer"}
    for spec in specs.values():
        assert spec.title and spec.description
        for param in spec.params:
            assert param.help, (spec.kind, param.name)
            if param.type == "choice":
                assert param.default in param.choices
            else:
                assert param.minimum is not None and param.maximum is not None
                assert param.minimum <= param.default <= param.maximum  # type: ignore[operator]
    slow = {p.name: p for p in specs["slow_steps"].params}
    assert (slow["delay_s"].type, slow["steps"].type) == ("float", "int")


def test_only_the_kinds_asked_for() -> None:
    assert [s.kind for s in chaos_specs(["kill", "nan_loss"])] == ["nan_loss", "kill"]  # menu order


def test_parse_request_fills_defaults_and_names_a_bad_field() -> None:
    assert parse_request("ballast", {}) == Ballast()
    assert parse_request("slow_steps", {"steps": "5"}) == SlowSteps(steps=5)  # a shell's text
    with pytest.raises(ValidationError, match="bytes"):
        parse_request("ballast", {"bytes": -1})
    with pytest.raises(ValidationError, match="delay_s"):
        parse_request("slow_steps", {"delay_s": "soon"})
    with pytest.raises(ValidationError, match="nope"):
        parse_request("kill", {"nope": 1})
    with pytest.raises(ValueError, match="unknown chaos kind 'explode'"):
        parse_request("explode", {})


def test_a_spike_is_a_trainer_kind_with_a_bounded_factor() -> None:
    spec = {s.kind: s for s in chaos_specs(["spike"])}["spike"]
    assert spec.performer == "trainer" and [p.name for p in spec.params] == ["factor"]
    with pytest.raises(ValidationError, match="factor"):
        parse_request("spike", {"factor": 0.5})  # a factor under 1 is no spike
