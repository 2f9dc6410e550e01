"""Bytes flipped in the newest verified checkpoint (performed by the supervisor:
``engine.supervisor.chaos.performers.corrupt_checkpoint``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engine.chaos.kind import ChaosKind, CheckpointNews, Pending, RunFacts


@dataclass
class CorruptedTag:
    """What ``corrupt_checkpoint`` remembers while it is tracked: the tag it damaged."""

    tag: str | None = None
    step: int | None = None


class CorruptCheckpoint(ChaosKind):
    title = "corrupt the newest checkpoint"
    description = (
        "bytes flipped in the newest checkpoint's largest file (its size unchanged): a resume "
        "must reject it and load an older one if one verifies, else refuse to start over"
    )
    performer = "supervisor"
    order = 110
    recovered_when = "the corrupted tag is rejected, or a newer checkpoint is sealed"
    kind: Literal["corrupt_checkpoint"] = "corrupt_checkpoint"

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return "flip bytes in the newest checkpoint's largest file"

    @classmethod
    def outcome(cls, values: Mapping[str, Any], run: RunFacts) -> str | None:
        steps = run.verified_steps
        if not steps:
            return "flip bytes in the newest checkpoint: there is no verified one, so the supervisor refuses"
        done = f"flip bytes in the largest file of the newest checkpoint (step {steps[0]})"
        if len(steps) > 1:
            return f"{done}; a resume skips it and loads step {steps[1]}, the one before"
        return (
            f"{done}, the only one that verifies: until the next save, a restart finds none and the run "
            "ends (a silent fresh start is refused; memtui resume --fresh starts over at step 0)"
        )

    @classmethod
    def event_shows(cls, pending: Pending, news: CheckpointNews) -> str | None:
        """The corrupted tag rejected or skipped on a load, or a newer checkpoint saved."""
        corrupted = pending.own(CorruptedTag)
        tag = corrupted.tag
        if news.rejected is not None and news.rejected[0] == tag:
            return f"{tag} rejected: {news.rejected[1]}"
        if news.loaded is not None and any(s.split(":")[0] == tag for s in news.loaded[1]):
            return f"{tag} skipped on load; {news.loaded[0]} loaded"
        saved = news.saved
        if saved is not None and corrupted.step is not None and saved.step > corrupted.step:
            return f"a newer checkpoint {saved.tag} saved"
        return None
