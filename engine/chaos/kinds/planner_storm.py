"""A hostile planner storm (performed by the supervisor, which decides its verdict:
``engine.supervisor.chaos.performers.planner_storm``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from engine.chaos.kind import ChaosKind


class PlannerStorm(ChaosKind):
    title = "hostile planner storm"
    description = "a burst of malformed or out-of-bounds directives at once: the policy must refuse them"
    performer = "supervisor"
    order = 130
    recovered_when = "every one refused, none applied"
    decided_by_the_performer = True  # every hostile directive refused, none admitted
    kind: Literal["planner_storm"] = "planner_storm"
    count: int = Field(100, ge=1, le=100_000)
    """Directives in the burst."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return f"send {values.get('count')} malformed or out-of-bounds directives at once"
