"""The table of chaos kinds: every ``ChaosKind`` defined in ``engine.chaos.kinds``, keyed by
kind, in menu order, and what every side builds from it.

Adding a kind is its contract module in ``engine/chaos/kinds/`` and its performer module
(``engine/trainer/chaos/performers/`` or ``engine/supervisor/chaos/performers/``): both are
found by importing every module of their package (``import_all``), so no list names them.
The wire's request union (``ChaosRequest``, one discriminated model per kind), the specs a
console builds its form from (``chaos_specs``) and a shell's loose values (``parse_request``,
a bad value refused naming the field) all come from ``KINDS``. Torch-free.
"""

from __future__ import annotations

import importlib
import pkgutil
import typing
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from engine.chaos.kind import ChaosKind, Performer


def import_all(package: str) -> None:
    """Import every module of the package named ``package`` (its kinds or performers define
    themselves there). By name: a performer module imports its base, not the reverse."""
    path = importlib.import_module(package).__path__
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")


def _subclasses(base: type[ChaosKind]) -> Iterable[type[ChaosKind]]:
    for sub in base.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _collect() -> dict[str, type[ChaosKind]]:
    import_all("engine.chaos.kinds")
    kinds = sorted((k for k in _subclasses(ChaosKind) if "kind" in k.model_fields), key=lambda k: k.order)
    return {k.name(): k for k in kinds}


KINDS: dict[str, type[ChaosKind]] = _collect()
"""Kind -> its object (request model, words, recovery signal), in menu order."""

if TYPE_CHECKING:
    ChaosRequest = ChaosKind
else:
    ChaosRequest = Annotated[Union[tuple(KINDS.values())], Field(discriminator="kind")]  # noqa: UP007
CHAOS_ADAPTER: TypeAdapter[ChaosRequest] = TypeAdapter(ChaosRequest)


def kind_of(name: str) -> type[ChaosKind] | None:
    """The kind named ``name``; None for one this engine does not know (an older run's)."""
    return KINDS.get(name)


def parse_request(kind: str, params: dict[str, Any]) -> ChaosRequest:
    """A request from loose values (a shell's ``--param value``); raises pydantic's
    ValidationError naming the field, or ValueError for an unknown kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown chaos kind {kind!r} (choose from {', '.join(KINDS)})")
    return CHAOS_ADAPTER.validate_python({"kind": kind, **params})


def values_of(request: ChaosKind) -> dict[str, Any]:
    """A request's parameters (defaults filled in), as stored and shown."""
    return request.model_dump(mode="json", exclude={"kind"})


# ------------------------------------------------------------------ what is offered


class ChaosParamSpec(BaseModel):
    """One parameter of a kind, as a form shows it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: Literal["int", "float", "choice"]
    default: int | float | str
    minimum: float | None = None
    maximum: float | None = None
    choices: list[str] = Field(default_factory=list)
    help: str = ""


class ChaosKindSpec(BaseModel):
    """A kind the engine can inject now, with its parameters (sent in ``Welcome``)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    title: str
    description: str
    performer: Performer
    params: list[ChaosParamSpec] = Field(default_factory=list)


def chaos_specs(kinds: Iterable[str] | None = None) -> list[ChaosKindSpec]:
    """The specs of ``kinds`` (default: every kind), in menu order."""
    wanted = set(KINDS) if kinds is None else set(kinds)
    return [_spec(model) for kind, model in KINDS.items() if kind in wanted]


def _spec(model: type[ChaosKind]) -> ChaosKindSpec:
    params = [_param(name, field) for name, field in model.model_fields.items() if name != "kind"]
    return ChaosKindSpec(
        kind=model.name(),
        title=model.title,
        description=model.description,
        performer=model.performer,
        params=params,
    )


def _param(name: str, field: Any) -> ChaosParamSpec:
    annotation = field.annotation
    choices = (
        [str(c) for c in typing.get_args(annotation)] if typing.get_origin(annotation) is Literal else []
    )
    bounds = {type(m).__name__: m for m in field.metadata}
    low = getattr(bounds.get("Ge"), "ge", None)
    high = getattr(bounds.get("Le"), "le", None)
    kind: Literal["int", "float", "choice"] = "choice" if choices else "int" if annotation is int else "float"
    return ChaosParamSpec(
        name=name,
        type=kind,
        default=field.default,
        minimum=low,
        maximum=high,
        choices=choices,
        help=field.description or "",
    )
