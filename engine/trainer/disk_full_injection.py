"""An injected full disk for checkpoint saves, for tests and rehearsals.

``MEMTUI_CHAOS_DISK_FULL_FROM_STEP=N``: every save at optimizer step N or later fails the
way a full disk fails DeepSpeed's ``torch.save``: the file it is writing gets half of its
bytes, then ``OSError(ENOSPC)``. The files written before it in the same save stay, as they
would. What must hold (and ``tests/trainer/test_checkpoint_disk_full.py`` checks): the save
is reported failed, the staging dir is removed, every older checkpoint is untouched and the
run goes on.
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
    writer = getattr(engine, "checkpoint_engine", None)
    if first is None or step < first or writer is None:
        yield
        return

    def full_disk_save(state_dict: Any, path: str) -> None:
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        with open(path, "wb") as f:
            f.write(buffer.getbuffer()[: buffer.tell() // 2])
        raise OSError(errno.ENOSPC, "No space left on device (injected)", path)

    writer.save = full_disk_save  # an instance attribute shadows the class's method
    try:
        yield
    finally:
        del writer.save
