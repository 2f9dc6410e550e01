"""One directive as the queue holds it: the directive, its verdict, its state and reasons,
what the trainer applied and, later, its measured effect. Torch-free."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.directive_effect import DirectiveEffect
from engine.directives.directive import Directive
from engine.domain import DirectiveField, DirectiveState, DirectiveValue, Verdict
from engine.wire.protocol import DirectiveView


@dataclass
class Entry:
    """A directive and what became of it; ``view`` is what operators see."""

    directive: Directive
    verdict: Verdict
    state: DirectiveState
    reasons: list[str] = field(default_factory=list)
    applied: dict[DirectiveField, DirectiveValue] = field(default_factory=dict)
    effect: DirectiveEffect | None = None
    in_effect: dict[DirectiveField, DirectiveValue] = field(default_factory=dict)
    """Its fields' values in effect when it was last judged, or just before it was applied."""
    stale_after_step: int | None = None
    """Past this step the policy refuses it as stale (``DirectiveView.stale_after_step``)."""

    def note_in_effect(self, current: Mapping[DirectiveField, DirectiveValue]) -> None:
        """Keep the values in effect now of this directive's own fields (finite ones)."""
        asked = self.directive.values()
        self.in_effect = {k: v for k, v in current.items() if k in asked and math.isfinite(v)}

    def view(self) -> DirectiveView:
        d = self.directive
        shown = self.applied if self.state == "applied" else self.verdict.patch
        return DirectiveView(
            id=d.id,
            source=d.source,
            created_at=d.created_at,
            expires_at=d.expires_at,
            step=d.step,
            requested=d.values(),
            allowed=dict(shown),
            in_effect=dict(self.in_effect),
            bounds=dict(self.verdict.bounds),
            reasons=([d.rationale] if d.rationale else []) + self.reasons,
            state=self.state,
            evidence=list(d.evidence),
            effect=self.effect,
            rollback=d.rollback,
            stale_after_step=self.stale_after_step,
        )
