"""An injected full disk for checkpoint saves, for tests and rehearsals.

``MEMTUI_CHAOS_DISK_FULL_FROM_STEP=N``: every save at optimizer step N or later fails the
way a full disk fails DeepSpeed's ``torch.save``: the file it is writing gets half of its
bytes, then ``OSError(ENOSPC)``. The files written before it in the same save stay, as they
would. What must hold (and ``tests/trainer/test_checkpoint_disk_full.py`` checks): the save
is reported failed, the staging dir is removed, every older checkpoint is untouched and the
run goes on. A chaos request (``disk_full``: the next K saves) goes through the same
``full_disk`` (engine.trainer.chaos.performers.disk_full).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from collections.abc import Iterator
from typing import Any

import torch

DISK_FULL_ENV = "MEMTUI_CHAOS_DISK_FULL_FROM_STEP"


def disk_full_from_step() -> int | None:
    """The first step whose save fails, from the environment; None: never."""
    text = os.environ.get(DISK_FULL_ENV, "").strip()
    return int(text) if text else None


@contextlib.contextmanager
def disk_full_if_due(engine: Any, step: int) -> Iterator[None]:
    """While saving ``step``: make the engine's checkpoint writes fail when the chaos is due."""
    first = disk_full_from_step()
    if first is None or step < first:
        yield
        return
    with full_disk(engine):
        yield


@contextlib.contextmanager
def full_disk(engine: Any) -> Iterator[None]:
    """Every checkpoint write of ``engine`` inside fails as on a full disk (half a file, then
    ENOSPC). Nests: an outer ``full_disk`` is in force again when an inner one ends."""
    writer = getattr(engine, "checkpoint_engine", None)
    if writer is None:
        yield
        return

    def full_disk_save(state_dict: Any, path: str) -> None:
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        with open(path, "wb") as f:
            f.write(buffer.getbuffer()[: buffer.tell() // 2])
        raise OSError(errno.ENOSPC, "No space left on device (injected)", path)

    outer = vars(writer).get("save")  # an enclosing full_disk's, if any
    writer.save = full_disk_save  # an instance attribute shadows the class's method
    try:
        yield
    finally:
        if outer is None:
            del writer.save
        else:
            writer.save = outer
