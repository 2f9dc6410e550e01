"""``corrupt_checkpoint``: bytes flipped in the newest verified checkpoint's largest file
(``chaos_acts.corrupt``); refused while no checkpoint verifies."""

from __future__ import annotations

from engine.chaos.kind import ChaosKind, Pending
from engine.chaos.kinds.corrupt_checkpoint import CorruptCheckpoint, CorruptedTag
from engine.checkpoints.catalog import TAG_PATTERN
from engine.events import ChaosInjected
from engine.supervisor.chaos import acts as chaos_acts
from engine.supervisor.chaos.performer import Aim, Desk, SupervisorPerformer


class CorruptCheckpointPerformer(SupervisorPerformer):
    model = CorruptCheckpoint

    def aim(self, desk: Desk, state: str) -> Aim | str:
        target = chaos_acts.corruption_target(desk.run.checkpoints)
        if target is None:
            return "there is no verified checkpoint to corrupt yet"
        return Aim(
            target=target.file, target_tag=target.tag, target_step=target.step, done_to_it="bytes flipped"
        )

    def act(self, desk: Desk, request: ChaosKind, chaos_id: str, aim: Aim) -> None:
        assert aim.target is not None and aim.target_tag is not None and aim.target_step is not None
        target = chaos_acts.Corruption(aim.target_tag, aim.target_step, aim.target)
        try:
            chaos_acts.corrupt(desk.run.checkpoints, target)
        except OSError as err:  # pruned meanwhile, or unwritable: injected, but not done
            desk.resolve(chaos_id, False, f"could not corrupt {target.file}: {err.strerror or err}")

    def taken_up(self, pending: Pending, injected: ChaosInjected) -> None:
        if injected.target:  # the damaged file, relative to checkpoints/: its tag first
            corrupted = pending.own(CorruptedTag)
            corrupted.tag = injected.target.split("/")[0]
            found = TAG_PATTERN.match(corrupted.tag)
            corrupted.step = int(found.group(1)) if found else None
