"""``drop_consoles``: every console closed once its queue drained (they reconnect and
replay); its verdict is how many were closed."""

from __future__ import annotations

from engine.chaos.kind import ChaosKind
from engine.chaos.kinds.consoles import DropConsoles
from engine.supervisor.chaos.performer import Aim, Desk, SupervisorPerformer

CONSOLE_DRAIN_S = 1.0  # s consoles get to receive what is queued before they are dropped


class DropConsolesPerformer(SupervisorPerformer):
    model = DropConsoles

    def act(self, desk: Desk, request: ChaosKind, chaos_id: str, aim: Aim) -> None:
        desk.spawn(_drop(desk, chaos_id), "chaos: drop consoles")


async def _drop(desk: Desk, chaos_id: str) -> None:
    await desk.consoles.drain(CONSOLE_DRAIN_S)  # the requester gets its answer first
    dropped = sum(1 for _ in desk.consoles)
    await desk.consoles.close()
    desk.resolve(chaos_id, True, f"{dropped} console connection{'s' if dropped != 1 else ''} closed")
