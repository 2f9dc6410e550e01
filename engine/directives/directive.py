"""A planner's suggestion, as refused or admitted at the edge.

A ``Directive`` is strict: unknown fields, wrong types (a string for a number, a bool, a
nested object), NaN/inf, negative or absurd values are refused with a reason naming the
field, before any policy looks at them. The edge limits here are the widest anything may
ever ask for; the run's ``PolicyConfig`` bounds are tighter and decide what is applied.
Torch-free.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.domain import DIRECTIVE_FIELDS, EDGE_LIMITS, INTEGER_FIELDS, DirectiveField, DirectiveValue
from engine.rollback import Rollback

MAX_ID_CHARS = 64
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
"""A directive id: what a planner may name it, and what an operator's answer may name."""
MAX_RATIONALE_CHARS = 2000  # one paragraph; a 10 MB "rationale" is hostile, not verbose
MAX_RAW_ITEMS = 64  # keys of a raw directive object before we stop reading it
MAX_EVIDENCE_ITEMS = 8  # figures a planner cites for one suggestion
MAX_EVIDENCE_CHARS = 200  # one figure, e.g. "7 overflows in 200 steps"
OPERATOR_SOURCE = "operator"
"""The source of an operator's own directives (``Propose``'s default; the socket is the
owner's alone): the only one that may return a field to its run default beyond the bounds."""


class DirectiveRefused(ValueError):
    """A directive that cannot even be evaluated; ``field`` names the offending key."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class Directive(BaseModel):
    """A suggested change to the run's hyperparameters; any subset of the four fields."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: str = Field(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN)
    source: str = Field(min_length=1, max_length=128)
    """``rules``, ``operator``, ``command:...``, ``http:...``."""
    created_at: float = Field(allow_inf_nan=False, ge=0.0)
    """Unix time it was made."""
    step: int = Field(0, ge=0, le=10**12)
    """The optimizer step whose telemetry it was based on."""
    expires_at: float = Field(allow_inf_nan=False, ge=0.0)
    """Unix time after which it may no longer be applied."""
    rationale: str = Field("", max_length=MAX_RATIONALE_CHARS)
    evidence: list[Annotated[str, Field(max_length=MAX_EVIDENCE_CHARS)]] = Field(
        default_factory=list, max_length=MAX_EVIDENCE_ITEMS
    )
    """The telemetry the planner read, one figure a line (e.g. "7 overflows in 200 steps")."""
    lr_multiplier: float | None = Field(
        None, allow_inf_nan=False, ge=EDGE_LIMITS["lr_multiplier"][0], le=EDGE_LIMITS["lr_multiplier"][1]
    )
    gradient_clip_norm: float | None = Field(
        None,
        allow_inf_nan=False,
        ge=EDGE_LIMITS["gradient_clip_norm"][0],
        le=EDGE_LIMITS["gradient_clip_norm"][1],
    )
    loss_scale_initial_power: int | None = Field(
        None, ge=EDGE_LIMITS["loss_scale_initial_power"][0], le=EDGE_LIMITS["loss_scale_initial_power"][1]
    )
    micro_batch_size: int | None = Field(
        None, ge=EDGE_LIMITS["micro_batch_size"][0], le=EDGE_LIMITS["micro_batch_size"][1]
    )
    rollback: Rollback | None = None
    """Back to a verified tag with the data cursor moved (``engine.rollback``); a directive
    that rolls back changes nothing else: the supervisor restarts the trainer, no step applies it."""

    def values(self) -> dict[DirectiveField, int | float]:
        """The fields it asks to change, in DIRECTIVE_FIELDS order."""
        out: dict[DirectiveField, int | float] = {}
        for name in DIRECTIVE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def new_directive_id() -> str:
    return f"d-{uuid.uuid4().hex[:10]}"


def parse_directive(raw: Any) -> Directive:
    """``raw`` (parsed JSON from anywhere) as a Directive; DirectiveRefused names the field."""
    if not isinstance(raw, dict):
        raise DirectiveRefused("(directive)", f"must be a JSON object, got {type(raw).__name__}")
    if len(raw) > MAX_RAW_ITEMS:
        raise DirectiveRefused("(directive)", f"{len(raw)} keys; at most {MAX_RAW_ITEMS}")
    raw = dict(raw)  # normalised below; the caller's object stays as it was
    _refuse_hostile_numbers(raw)
    try:
        return Directive.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(directive)"
        if first["type"] == "extra_forbidden":
            raise DirectiveRefused(field, "unknown field") from None
        raise DirectiveRefused(field, first["msg"]) from None


def _refuse_hostile_numbers(raw: dict[str, Any]) -> None:
    """Name the field for NaN/inf and bools before pydantic's generic messages."""
    for name in DIRECTIVE_FIELDS:
        value = raw.get(name)
        if isinstance(value, bool):
            raise DirectiveRefused(name, "a boolean is not a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise DirectiveRefused(name, f"{value!r} is not a finite number")
        if name in INTEGER_FIELDS and isinstance(value, float):
            if not value.is_integer():
                raise DirectiveRefused(name, f"{value!r} is not a whole number")
            raw[name] = int(value)  # JSON has one number type: 4.0 means 4


def draft(
    values: dict[str, Any],
    *,
    source: str,
    step: int,
    rationale: str = "",
    evidence: list[str] | None = None,
    ttl_s: float,
    now: float | None = None,
    directive_id: str | None = None,
) -> Directive:
    """A Directive from bare values (a planner's or an operator's), validated like any other."""
    created = time.time() if now is None else now
    raw: dict[str, Any] = {
        "id": directive_id or new_directive_id(),
        "source": source,
        "created_at": created,
        "step": step,
        "expires_at": created + ttl_s,
        "rationale": rationale,
        "evidence": list(evidence or []),
    }
    for name, value in values.items():
        if name in raw:
            raise DirectiveRefused(name, "not a directive field")
        raw[name] = value
    return parse_directive(raw)


def edited_values(directive: Directive, values: dict[str, Any]) -> dict[DirectiveField, DirectiveValue]:
    """An operator's edited values for ``directive`` through the same edge checks as any
    directive; only its own fields may be edited (a directive changes what it names)."""
    asked = directive.values()
    for name in values:
        if name not in DIRECTIVE_FIELDS:
            raise DirectiveRefused(str(name)[:64], "not a directive field")
        if name not in asked:
            own = ", ".join(asked) or "nothing"
            raise DirectiveRefused(name, f"not a field of this directive (it changes {own})")
    base = directive.model_dump(exclude={str(name) for name in DIRECTIVE_FIELDS})
    checked = parse_directive({**base, **values})
    return {k: v for k, v in checked.values().items() if k in values}
