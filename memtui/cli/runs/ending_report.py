"""What ``memtui stop`` says once a run has ended: its state and step, a save that failed
(a final save on a full disk), and the newest checkpoint that verifies, read from disk.

"stopped at step 1054" alone would hide that the final save failed and a resume starts at
step 300: this report names both, and the exit status says it (1 when the newest save did
not succeed). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.checkpoints.standing import standing_of
from engine.domain import RunStatus

OK_ENDINGS = ("stopped", "completed")


@dataclass(frozen=True)
class NewestCheckpoint:
    """The newest committed checkpoint whose files verify against its manifest (sha256)."""

    step: int | None
    tag: str | None
    on_disk: int
    """Committed tags in ``checkpoints/`` (those that did not verify included)."""


def newest_checkpoint(directory: Path) -> NewestCheckpoint:
    """The catalog's full verification of every tag (``engine.checkpoints.standing``)."""
    standing = standing_of(directory)
    return NewestCheckpoint(standing.step, standing.tag, standing.on_disk)


def save_missed(status: RunStatus) -> bool:
    """The newest save failed or was skipped (nothing saved after it)."""
    return status.last_save is not None and status.last_save.outcome != "saved"


def exit_code(status: RunStatus) -> int:
    """0 for a run stopped or completed whose newest save succeeded (or that never saved)."""
    return 0 if status.state in OK_ENDINGS and not save_missed(status) else 1


def ending_lines(status: RunStatus, newest: NewestCheckpoint, *, already: bool = False) -> list[str]:
    """The ending, then (indented) a missed save and the checkpoint a resume starts from."""
    detail = f" ({status.exit_reason})" if status.exit_reason else ""
    prefix = "was already " if already else ""
    lines = [f"{status.run_id}: {prefix}{status.state} at step {status.step}{detail}"]
    save = status.last_save
    if save is not None and save_missed(status):
        final = "the final save" if save.step >= status.step else "the last save"
        missed = "failed" if save.outcome == "failed" else "was skipped"
        lines.append(f"  {final} (step {save.step}) {missed}: {save.reason or 'no reason given'}")
    lines.append("  " + _checkpoint_line(status, newest))
    return lines


def _checkpoint_line(status: RunStatus, newest: NewestCheckpoint) -> str:
    if newest.step is None:
        if newest.on_disk:
            return f"no checkpoint verifies ({newest.on_disk} on disk): a resume needs --fresh"
        return "no checkpoint: a resume starts at step 0"
    line = f"newest verified checkpoint: step {newest.step} ({newest.tag})"
    behind = status.step - newest.step
    if behind > 0:
        line += f"; a resume redoes the {behind} step{'' if behind == 1 else 's'} after it"
    return line


def ending_document(status: RunStatus, newest: NewestCheckpoint) -> dict[str, Any]:
    """The same as one JSON object (``memtui stop --json``)."""
    return {
        "run_id": status.run_id,
        "state": status.state,
        "step": status.step,
        "exit_reason": status.exit_reason,
        "last_save": status.last_save.model_dump(mode="json") if status.last_save else None,
        "save_missed": save_missed(status),
        "checkpoint_step": newest.step,
        "checkpoint_tag": newest.tag,
        "checkpoints_on_disk": newest.on_disk,
    }
