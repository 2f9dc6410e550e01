"""Directives in words for the console: each change (``memtui.directive_phrases``, the
CLI's formatter too) with the new value highlighted, and ages."""

from __future__ import annotations

from engine.wire.protocol import DirectiveView
from memtui.directive_phrases import FIELD_LABELS, changes_text, format_value
from memtui.formatting import format_duration

__all__ = ["FIELD_LABELS", "format_value", "render_changes", "render_timing"]


def _highlight(text: str, differs: bool) -> str:
    """The new value: a warning colour where the policy moved or refused what was asked."""
    style = "$text-warning" if differs else "$text-success"
    return f"[{style}]{text}[/]"


def render_changes(directive: DirectiveView) -> str:
    """``lr × 1→0.5  clip norm 1.5→1.25 (asked 2, allowed 1.25)``: in effect → new value."""
    d = directive
    back = d.rollback.model_dump() if d.rollback else None
    empty = "[$text-muted]no changes[/]"
    return changes_text(d.requested, d.allowed, d.in_effect, _highlight, empty=empty, rollback=back)


def render_timing(directive: DirectiveView, now: float, step: int | None = None) -> str:
    """``age 1m02s, stale in 430 steps, expires in 3m58s``: what ends it first may be either.

    The policy refuses a directive based on telemetry over ``policy.max_staleness_steps``
    old, so on a fast run it goes stale long before its TTL (``tiny`` on a CPU: 500 steps
    in about 12 s, against a 5-minute TTL). Without the current ``step``, the step it goes
    stale after."""
    parts = [f"age {format_duration(max(0.0, now - directive.created_at))}"]
    last = directive.stale_after_step
    if last is not None and step is None:
        parts.append(f"stale after step {last}")
    elif last is not None and step is not None:
        parts.append(f"stale in {last - step} steps" if step < last else "[$text-error]stale[/]")
    if directive.expires_at is not None:
        left = directive.expires_at - now
        parts.append(f"expires in {format_duration(left)}" if left > 0 else "[$text-error]expired[/]")
    return ", ".join(parts)
