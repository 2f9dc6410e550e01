"""Every console connection dropped (performed by the supervisor, which decides its
verdict: ``engine.supervisor.chaos.performers.consoles``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from engine.chaos.kind import ChaosKind


class DropConsoles(ChaosKind):
    title = "drop every console"
    description = "every console connection is closed; consoles reconnect and replay what they missed"
    performer = "supervisor"
    order = 120
    recovered_when = "at once"
    decided_by_the_performer = True  # how many consoles it closed
    kind: Literal["drop_consoles"] = "drop_consoles"

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return "close every console connection (they reconnect and replay)"
