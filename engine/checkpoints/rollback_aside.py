"""A rollback's checkpoint side: the tags newer than the one rolled back to are moved aside,
kept and not deleted, so that no resume picks them and no later save collides with them.

``checkpoints/rolled_back/<label>/<tag>``: one folder per rollback (its directive id), so a
second rollback over the same steps never meets the first one's tags. ``latest`` is
pointed at the tag. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

from engine.checkpoints import catalog
from engine.rollback import ROLLED_BACK_DIR
from engine.run.durable_file import fsync_dir, replace_atomically


def set_aside_after(directory: Path, tag: str, label: str) -> list[str]:
    """Move every committed tag newer than ``tag`` into ``rolled_back/<label>/``; returns their
    names, oldest first. ``label`` is a directive id (``[A-Za-z0-9][A-Za-z0-9_.:-]*``)."""
    steps = dict((name, step) for step, name in catalog.committed_tags(directory))
    if tag not in steps:
        raise FileNotFoundError(f"{directory / tag}: no such checkpoint to roll back to")
    newer = [name for name, step in sorted(steps.items(), key=lambda item: item[1]) if step > steps[tag]]
    if newer:
        target = directory / ROLLED_BACK_DIR / label
        target.mkdir(parents=True, exist_ok=True)
        for name in newer:
            (directory / name).rename(target / name)
        fsync_dir(target)
    replace_atomically(directory / catalog.LATEST_NAME, tag.encode())
    fsync_dir(directory)
    return newer
