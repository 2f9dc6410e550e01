"""The trainer's rank processes under torchrun, for the hardware panel's process rows.

torchrun is the process the supervisor started; the ranks are its children, each in a
session of its own, and each carries torchrun's ``RANK`` in its environment. Torch-free
(psutil); reading another process's environment needs the same user, which ours are.
"""

from __future__ import annotations

import contextlib
from typing import Any


def rank_processes(launcher_pid: int) -> dict[str, int]:
    """``{"rank 0": pid, ...}`` for the children of ``launcher_pid`` that have a RANK; {} if none."""
    import psutil

    try:
        children = psutil.Process(launcher_pid).children()
    except psutil.Error:
        return {}
    found: dict[str, int] = {}
    for child in children:
        rank = _rank_of(child, psutil)
        if rank is not None:
            found[f"rank {rank}"] = child.pid
    return dict(sorted(found.items(), key=lambda item: int(item[0].split()[1])))


def _rank_of(process: Any, psutil: Any) -> int | None:
    with contextlib.suppress(psutil.Error, OSError, ValueError):
        rank = process.environ().get("RANK")
        return int(rank) if rank is not None else None
    return None
