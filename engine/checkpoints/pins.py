"""Checkpoints held back from the rotation: the tags a pending rollback would resume from.

A rollback proposed at step N names a tag from before the spike; with the rotation keeping
the newest ``checkpoint.keep`` tags, an operator who takes a few intervals to answer would
find that tag pruned and the rollback refused. The supervisor writes the tags of the
rollbacks still waiting for an answer to ``checkpoints/pinned.json`` (tag -> why); the
trainer's rotation reads it before each prune and keeps them. Once the rollback is
answered the pin goes, and the next rotation prunes the tag as usual.

A pins file that cannot be read pins nothing (the rotation goes on as it would without
one): the file only ever holds tags back, never deletes. Torch-free.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from engine.checkpoints import catalog
from engine.run.durable_file import replace_atomically

log = logging.getLogger(__name__)

PINS_NAME = "pinned.json"


def write_pins(directory: Path, pins: Mapping[str, str]) -> None:
    """The pinned tags (tag -> why, e.g. the directive waiting on it), replacing the file;
    no pins removes it."""
    path = directory / PINS_NAME
    if not pins:
        path.unlink(missing_ok=True)
        return
    directory.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, json.dumps(dict(sorted(pins.items())), indent=1).encode())


def read_pins(directory: Path) -> dict[str, str]:
    """Tag -> why of every pinned tag; empty when there is no file or it cannot be read."""
    path = directory / PINS_NAME
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("%s unreadable (%s): no checkpoint is held back", path, err)
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {str(tag): str(why) for tag, why in loaded.items()}


def pinned_steps(directory: Path) -> set[int]:
    """The steps of the pinned tags that name a checkpoint (``global_stepN``)."""
    steps = set()
    for tag in read_pins(directory):
        matched = catalog.TAG_PATTERN.fullmatch(tag)
        if matched is not None:
            steps.add(int(matched.group(1)))
    return steps
