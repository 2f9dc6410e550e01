"""One event per checkpoint save, as the trainer tells the supervisor about it."""

from __future__ import annotations

from engine.checkpoints.store import SaveOutcome
from engine.events import CheckpointFailed, CheckpointSaved, CheckpointSkipped
from engine.trainer.link import Link


def report_save(link: Link, saved: SaveOutcome, stall_s: float, background: bool = False) -> None:
    """One event per save: ``checkpoint_saved`` with the training stall (s), or
    ``checkpoint_skipped`` (no room) / ``checkpoint_failed`` as a critical alert."""
    if saved.status != "saved":
        not_saved = CheckpointSkipped if saved.status == "skipped" else CheckpointFailed
        link.event(
            not_saved(
                step=saved.step,
                tag=saved.tag,
                reason=saved.reason,
                free_bytes=saved.free_bytes,
                needed_bytes=saved.needed_bytes,
            ),
            f"checkpoint {saved.tag} {saved.status}: {saved.reason}",
        )
        return
    where = f"sealed in the background in {saved.seal_s:.2f} s" if background else "sealed in line"
    link.event(
        CheckpointSaved(
            step=saved.step,
            tag=saved.tag,
            seconds=round(stall_s, 4),  # the training stall
            write_s=round(saved.write_s, 4),
            seal_s=round(saved.seal_s, 4),
            background=background,
            size_bytes=saved.size_bytes,
            pruned=saved.pruned,
        ),
        f"checkpoint {saved.tag} saved: training waited {stall_s:.2f} s, {where} "
        f"({saved.size_bytes / 1e6:.1f} MB)",
    )
