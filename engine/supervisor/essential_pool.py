"""Threads kept for what the supervisor must do: restart decisions, checkpoint
verification, reading a follower's outcome. Torch-free.

``asyncio.to_thread`` shares the loop's default executor with everything else: a planner
ask or a hardware probe that hangs (a dead mount, a trickling endpoint) holds its thread,
and enough of them queue the restart of a dead trainer behind them. Work the run cannot do
without goes through ``off_loop`` instead, on a small pool nothing else uses.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")

WORKERS = 2  # a restart decision and a verification at once; nothing else runs here

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def essential_pool() -> ThreadPoolExecutor:
    """The supervisor's own pool, created on first use."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="supervisor-essential")
        return _pool


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the essential pool, awaited without blocking the loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(essential_pool(), partial(fn, *args))
