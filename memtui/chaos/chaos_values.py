"""A chaos kind's parameters as an operator types them, and back.

Text becomes a typed value by the kind's spec (``ChaosParamSpec``: int, float or a choice,
with bounds); a size in bytes may carry a binary suffix (``64M``, ``1.5G``, ``512KiB``). A
value that does not fit raises ``ParamError`` naming the parameter, so the console's form
and ``memtui chaos`` refuse it before anything is sent. ``build_request`` then makes the
wire request (``engine.chaos.table.parse_request``), whose own check is the last word.
Pure and torch-free: the console and the CLI both use it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from engine.chaos.table import KINDS, ChaosKindSpec, ChaosParamSpec, ChaosRequest, parse_request
from memtui.formatting import format_bytes

SIZE_UNITS: dict[str, int] = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
"""Binary multipliers of a size's suffix (``K``, ``KB`` and ``KiB`` all mean 1024)."""
_SIZE = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
SIZE_PARAMS = frozenset({"bytes"})
"""Parameters that are sizes in bytes: they take suffixes and show in binary units."""

ParamValue = int | float | str


class ParamError(ValueError):
    """A parameter value that does not fit; ``field`` names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def is_size(param: ChaosParamSpec) -> bool:
    return param.name in SIZE_PARAMS and param.type == "int"


def parse_size(text: str) -> int:
    """``"64M" -> 67108864``; a plain integer is bytes. ValueError if it is not a whole size."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (bytes, or with a suffix: 64M, 1.5G, 512K)")
    number, unit = match.groups()
    value = float(number) * SIZE_UNITS[unit.lower()]
    if not value.is_integer():
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def parse_value(param: ChaosParamSpec, text: str) -> ParamValue:
    """``text`` as ``param``'s type, within its bounds; ParamError naming it otherwise."""
    text = text.strip()
    if param.type == "choice":
        if text not in param.choices:
            raise ParamError(param.name, f"choose from {', '.join(param.choices)}; got {text!r}")
        return text
    value: int | float
    try:
        if is_size(param):
            value = parse_size(text)
        elif param.type == "int":
            value = int(text)
        else:
            value = float(text)
    except ValueError as err:
        kind = "an integer" if param.type == "int" else "a number"
        reason = str(err) if is_size(param) else f"not {kind}: {text!r}"
        raise ParamError(param.name, reason) from None
    if not math.isfinite(value):
        raise ParamError(param.name, f"must be finite, got {text!r}")
    if param.minimum is not None and value < param.minimum:
        raise ParamError(param.name, f"must be at least {format_bound(param, param.minimum)}, got {text}")
    if param.maximum is not None and value > param.maximum:
        raise ParamError(param.name, f"must be at most {format_bound(param, param.maximum)}, got {text}")
    return value


def parse_values(spec: ChaosKindSpec, texts: Mapping[str, str]) -> dict[str, ParamValue]:
    """Every given text typed by ``spec``; an unknown parameter is refused naming the known ones."""
    params = {p.name: p for p in spec.params}
    values: dict[str, ParamValue] = {}
    for name, text in texts.items():
        if name not in params:
            known = ", ".join(params) or "none"
            raise ParamError(name, f"{spec.kind} has no such parameter (its parameters: {known})")
        values[name] = parse_value(params[name], text)
    return values


def build_request(spec: ChaosKindSpec, texts: Mapping[str, str]) -> ChaosRequest:
    """The wire request for ``spec``'s kind from typed-in texts (missing ones: the defaults)."""
    if spec.kind not in KINDS:
        raise ParamError("kind", f"{spec.kind!r} is unknown to this memtui (a newer engine?)")
    values = parse_values(spec, texts)
    try:
        return parse_request(spec.kind, values)
    except ValidationError as err:
        first = err.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in first["loc"][1:]) or spec.kind
        raise ParamError(field, first["msg"]) from None


def request_values(request: ChaosRequest) -> dict[str, Any]:
    """A request's parameters (defaults filled in), without its ``kind``."""
    return request.model_dump(mode="json", exclude={"kind"})


def format_value(param: ChaosParamSpec, value: Any) -> str:
    """A value as the form's input shows it, parseable again: sizes as ``256M``."""
    if is_size(param) and isinstance(value, int):
        return format_size(value)
    if isinstance(value, float) and value.is_integer() and param.type == "int":
        return str(int(value))
    return str(value)


def describe_values(spec: ChaosKindSpec, values: Mapping[str, Any]) -> str:
    """``bytes 64.0 MiB  steps 7``: each parameter as ``field value``, sizes with their unit."""
    params = {p.name: p for p in spec.params}
    return "  ".join(f"{name} {_for_people(params.get(name), value)}" for name, value in values.items())


def _for_people(param: ChaosParamSpec | None, value: Any) -> str:
    if param is not None and is_size(param) and isinstance(value, int):
        return format_bytes(value)
    return str(value) if param is None else format_value(param, value)


def format_size(n: int) -> str:
    """``268435456 -> "256M"``: the largest binary unit that divides it, else bytes."""
    for suffix in ("T", "G", "M", "K"):
        unit = SIZE_UNITS[suffix.lower()]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def format_bound(param: ChaosParamSpec, bound: float) -> str:
    if is_size(param):
        return format_bytes(bound)
    return str(int(bound)) if param.type == "int" or float(bound).is_integer() else f"{bound:g}"


def describe_bounds(param: ChaosParamSpec) -> str:
    """``1 B … 1.00 TiB``, ``forward | backward``, ``≥ 0``: what the parameter accepts."""
    if param.type == "choice":
        return " | ".join(param.choices)
    low, high = param.minimum, param.maximum
    if low is not None and high is not None:
        return f"{format_bound(param, low)} … {format_bound(param, high)}"
    if low is not None:
        return f"≥ {format_bound(param, low)}"
    if high is not None:
        return f"≤ {format_bound(param, high)}"
    return "any"
