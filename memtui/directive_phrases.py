"""A directive's change in words, one formatter for the console and the CLI.

The arrow reads from -> to: the value in effect -> the new value (``lr × 1→0.5``). Where
the policy allowed other than was asked, words say so: ``micro-batch 4→6 (asked 8, allowed
6)``; a field it refused: ``micro-batch 4, asked 8: not allowed``. A view stored before
the value in effect was recorded has no "from": ``lr × 0.5``. ``mark`` wraps the new value
(or the refusal) for a console's highlight: ``mark(text, differs)``, ``differs`` True where
the policy moved or refused what was asked. Textual-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engine.domain import DIRECTIVE_FIELDS, DirectiveField
from memtui.formatting import format_float

Value = float | int
Values = Mapping[str, Value] | Mapping[DirectiveField, Value]
"""Field -> value: a DirectiveView's own, or its JSON's (the CLI reads stored views)."""
Mark = Callable[[str, bool], str]

FIELD_LABELS: dict[str, str] = {
    "lr_multiplier": "lr ×",
    "gradient_clip_norm": "clip norm",
    "loss_scale_initial_power": "scale power",
    "micro_batch_size": "micro-batch",
}
NOT_ALLOWED = "not allowed"


def format_value(value: Value | None) -> str:
    return format_float(value, 4) if isinstance(value, float) else "—" if value is None else str(value)


def _plain(text: str, differs: bool) -> str:
    return text


def arrow(field: str, before: Value | None, new: str) -> str:
    """``lr × 1→0.5`` (``new`` already formatted); ``lr × 0.5`` when ``before`` is unknown."""
    label = FIELD_LABELS[field]
    return f"{label} {format_value(before)}→{new}" if before is not None else f"{label} {new}"


def change_phrase(
    field: str, before: Value | None, asked: Value | None, allowed: Value | None, mark: Mark = _plain
) -> str:
    """One field's change: in effect -> allowed, with what was asked where it differs."""
    if allowed is None:
        now = f" {format_value(before)}" if before is not None else ""
        return f"{FIELD_LABELS[field]}{now}, asked {format_value(asked)}: {mark(NOT_ALLOWED, True)}"
    differs = asked is not None and asked != allowed
    phrase = arrow(field, before, mark(format_value(allowed), differs))
    if differs:
        phrase += f" (asked {format_value(asked)}, allowed {format_value(allowed)})"
    return phrase


def rollback_phrase(rollback: Mapping[str, Any] | None) -> str | None:
    """``roll back to global_step200, skip 37 steps of data`` (None: not a rollback)."""
    if not rollback:
        return None
    return f"roll back to {rollback.get('tag')}, skip {rollback.get('skip_batches')} steps of data"


def changes_text(
    requested: Values,
    allowed: Values,
    in_effect: Values,
    mark: Mark = _plain,
    empty: str = "no changes",
    rollback: Mapping[str, Any] | None = None,
) -> str:
    """Every field the directive names, in DIRECTIVE_FIELDS order, two spaces apart; a
    rollback's tag and skip first."""
    back = rollback_phrase(rollback)
    parts = [back] if back else []
    parts += [
        change_phrase(field, in_effect.get(field), requested.get(field), allowed.get(field), mark)
        for field in DIRECTIVE_FIELDS
        if field in requested or field in allowed
    ]
    return "  ".join(parts) or empty
