"""Starting the trainer at the priority the supervisor was started with, while the
supervisor itself runs below it. Torch-free.

A process without root can lower its priority but never raise it back, and a child
inherits its parent's; on Linux the nice value belongs to a thread and a thread inherits
its creator's. So the supervisor's process first starts one launcher thread, at the
priority the user gave it, then lowers its main thread (``engine.cpu_share.step_aside``,
the event loop and every thread created after it); each trainer is forked from the
launcher thread, so it runs at the user's priority and the supervisor never competes with
it for a core. In-process users (tests, benches) never lower anything: the launcher is
then an ordinary thread at the same priority.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from engine.cpu_share import SUPERVISOR_NICE, step_aside

_pool: ThreadPoolExecutor | None = None


def _launcher_pool() -> ThreadPoolExecutor:
    """One thread, created on first use at the calling thread's priority, that forks trainers."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainer-launcher")
        _pool.submit(int).result()  # the thread exists from here on, at today's priority
    return _pool


def lower_supervisor_priority() -> bool:
    """Start the launcher thread, then lower the calling (main) thread by SUPERVISOR_NICE.
    Call once, in the supervisor's own process, before the event loop starts."""
    _launcher_pool()
    return step_aside(SUPERVISOR_NICE)


class LaunchedProcess:
    """A trainer forked by the launcher thread: ``pid``, ``returncode`` (None while it runs)
    and ``await wait()``, like ``asyncio.subprocess.Process``."""

    def __init__(self, popen: subprocess.Popen[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin = popen.stdin
        """Its stdin, if it was started with a pipe there (a standby trainer's orders)."""
        self.stdout = popen.stdout
        self._exited: asyncio.Future[int] = loop.create_future()
        threading.Thread(
            target=self._reap, args=(loop,), name=f"trainer-reaper-{popen.pid}", daemon=True
        ).start()

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        code = self._popen.wait()  # blocks this thread only, never the loop
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody waits
            loop.call_soon_threadsafe(self._settle, code)

    def _settle(self, code: int) -> None:
        if not self._exited.done():
            self._exited.set_result(code)

    async def wait(self) -> int:
        """The exit status (negative: killed by that signal), once it has exited."""
        return await asyncio.shield(self._exited)


async def launch(command: list[str], **popen_args: Any) -> LaunchedProcess:
    """``subprocess.Popen(command, **popen_args)`` forked from the launcher thread."""
    group = bool(popen_args.get("start_new_session"))
    return await fork(partial(subprocess.Popen, command, **popen_args), group=group)


async def fork(start: Callable[[], subprocess.Popen[Any]], *, group: bool) -> LaunchedProcess:
    """The process ``start()`` starts, called in the launcher thread; ``group``: it leads a
    process group of its own (``start_new_session``).

    Cancelled meanwhile (the supervisor shutting down), the fork still happens in the
    launcher thread: that process is killed as soon as it exists, since nobody would ever
    stop it (a test's in-process supervisor left such trainers running for minutes)."""
    loop = asyncio.get_running_loop()
    forked = loop.run_in_executor(_launcher_pool(), start)
    try:
        popen = await asyncio.shield(forked)
    except asyncio.CancelledError:
        forked.add_done_callback(partial(_kill_unwanted, group=group))
        raise
    return LaunchedProcess(popen, loop)


def _kill_unwanted(forked: asyncio.Future[subprocess.Popen[Any]], *, group: bool) -> None:
    """SIGKILL a process forked for a launch that was cancelled (its group, if it leads one)."""
    if forked.cancelled() or forked.exception() is not None:
        return
    popen = forked.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(popen.pid, signal.SIGKILL)
        else:
            popen.kill()
    threading.Thread(target=popen.wait, name=f"reap-{popen.pid}", daemon=True).start()
