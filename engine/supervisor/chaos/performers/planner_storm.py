"""``planner_storm``: hostile planner replies handed to the directive queue
(``chaos_acts.storm``) in slices, between which the loop serves steps and consoles; it
recovered when every one was refused."""

from __future__ import annotations

import asyncio

from engine.chaos.kind import ChaosKind
from engine.chaos.kinds.planner_storm import PlannerStorm
from engine.supervisor.chaos import acts as chaos_acts
from engine.supervisor.chaos.performer import Aim, Desk, SupervisorPerformer

STORM_SLICE = 50  # hostile directives per slice of a storm (~10 ms of the event loop)


class PlannerStormPerformer(SupervisorPerformer):
    model = PlannerStorm

    def act(self, desk: Desk, request: ChaosKind, chaos_id: str, aim: Aim) -> None:
        assert isinstance(request, PlannerStorm)
        desk.spawn(_storm(desk, chaos_id, request.count), "chaos: planner storm")


async def _storm(desk: Desk, chaos_id: str, count: int) -> None:
    refused = admitted = 0
    for first in range(0, count, STORM_SLICE):
        done = chaos_acts.storm(desk.directives, min(STORM_SLICE, count - first), first)
        refused, admitted = refused + done[0], admitted + done[1]
        await asyncio.sleep(0)
    desk.resolve(
        chaos_id, admitted == 0, f"{refused} of {count} hostile directives refused, {admitted} admitted"
    )
