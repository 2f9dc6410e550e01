"""A full disk for the next checkpoint saves (performed by the trainer:
``engine.trainer.chaos.performers.disk_full``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from engine.chaos.kind import ChaosKind, CheckpointNews, Pending


@dataclass
class FailedSaves:
    """What ``disk_full`` counts while it is tracked: the saves that failed since it applied."""

    count: int = 0


class DiskFull(ChaosKind):
    title = "full disk for saves"
    description = "the next checkpoint saves fail as on a full disk (every older checkpoint is kept)"
    performer = "trainer"
    order = 80
    recovered_when = "a save verifies after them"
    owned_by_the_trainer = True
    kind: Literal["disk_full"] = "disk_full"
    saves: int = Field(1, ge=1, le=1000)
    """Saves that fail."""

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        saves = values.get("saves")
        return f"fail the next checkpoint {'save' if saves == 1 else f'{saves} saves'} as on a full disk"

    @classmethod
    def event_shows(cls, pending: Pending, news: CheckpointNews) -> str | None:
        """A save that succeeds after at least K failed ones since it was applied."""
        if pending.applied_step is None:
            return None
        failed = pending.own(FailedSaves)
        if news.failed:
            failed.count += 1
        elif news.saved is not None and failed.count >= int(pending.params.get("saves", 1)):
            return f"{failed.count} saves failed, then {news.saved.tag} saved"
        return None
