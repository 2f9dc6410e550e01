"""One directive as the queue holds it: the directive, its verdict, its state and reasons,
what the trainer applied and, later, its measured effect. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.directives.directive import Directive
from engine.domain import DirectiveEffect, DirectiveField, DirectiveState, DirectiveValue, Verdict
from engine.protocol import DirectiveView


@dataclass
class Entry:
    """A directive and what became of it; ``view`` is what operators see."""

    directive: Directive
    verdict: Verdict
    state: DirectiveState
    reasons: list[str] = field(default_factory=list)
    applied: dict[DirectiveField, DirectiveValue] = field(default_factory=dict)
    effect: DirectiveEffect | None = None

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
            bounds=dict(self.verdict.bounds),
            reasons=([d.rationale] if d.rationale else []) + self.reasons,
            state=self.state,
            evidence=list(d.evidence),
            effect=self.effect,
        )
