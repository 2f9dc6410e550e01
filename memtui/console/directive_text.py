"""Directives in words: field labels, value changes and ages, shared by the panel and dialogs."""

from __future__ import annotations

from collections.abc import Mapping

from engine.domain import DIRECTIVE_FIELDS, DirectiveField
from engine.protocol import DirectiveView
from memtui.formatting import format_duration, format_float

FIELD_LABELS: dict[str, str] = {
    "lr_multiplier": "lr ×",
    "gradient_clip_norm": "clip norm",
    "loss_scale_initial_power": "scale power",
    "micro_batch_size": "micro-batch",
}


def format_value(value: float | int | None) -> str:
    return format_float(value, 4) if isinstance(value, float) else "—" if value is None else str(value)


def render_changes(
    requested: Mapping[DirectiveField, float | int], allowed: Mapping[DirectiveField, float | int]
) -> str:
    """``lr × 0.5→0.5  clip norm 2→1.25``: requested -> what the policy allows (highlighted if cut)."""
    parts = []
    for field in DIRECTIVE_FIELDS:
        if field not in requested and field not in allowed:
            continue
        asked, given = requested.get(field), allowed.get(field)
        style = "$text-warning" if asked != given else "$text-success"
        parts.append(f"{FIELD_LABELS[field]} {format_value(asked)}→[{style}]{format_value(given)}[/]")
    return "  ".join(parts) or "[$text-muted]no changes[/]"


def render_timing(directive: DirectiveView, now: float) -> str:
    """``age 1m02s, expires in 3m58s`` (or ``expired``)."""
    age = f"age {format_duration(max(0.0, now - directive.created_at))}"
    if directive.expires_at is None:
        return age
    left = directive.expires_at - now
    return f"{age}, expires in {format_duration(left)}" if left > 0 else f"{age}, [$text-error]expired[/]"
