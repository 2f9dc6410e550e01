"""The supervisor's background tasks: none of them ends in silence.

Every task the supervisor starts (the store's flush loop, the alert timers, the storage
retries, a planner's asks) is started by ``BackgroundTasks.spawn`` with a name. When one
ends with an exception (its cancellation aside), the exception is logged at once with the
task's name and traceback, and handed to ``on_failure`` with whether the task is
essential: the supervisor turns it into a critical alert and, for a task the run cannot go
on without, into a stop and a recorded failure. Nothing is left to asyncio's "Task
exception was never retrieved", which comes late (when the task is collected), if ever.

``loop_exception_handler`` does the same for whatever else reaches the event loop's
exception handler (a callback that raised, a task started elsewhere whose exception
nobody read), one loop turn later: it may be called from anywhere, even in the middle of a
store write. Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from engine.alerts.rules import Alert
from engine.events import TASK_FAILED_RULE

log = logging.getLogger(__name__)

FailureReport = Callable[[str, BaseException, bool], None]
"""(task name, the exception, whether the run cannot go on without the task)."""


def failure_alert(name: str, err: BaseException, essential: bool) -> Alert:
    """The critical alert (an instant: rule ``supervisor_task``) for a task that failed."""
    error = f"{type(err).__name__}: {err}"
    stopping = "; the run cannot go on without it: stopping" if essential else ""
    return Alert(
        TASK_FAILED_RULE,
        "critical",
        f"supervisor task {name!r} failed: {error}{stopping}",
        {"task": name, "error": error, "essential": essential},
    )


class BackgroundTasks:
    """Tasks of one supervisor, each watched until it ends; ``close`` cancels the rest."""

    def __init__(self, on_failure: FailureReport) -> None:
        self._on_failure = on_failure
        self._tasks: dict[asyncio.Task[Any], tuple[str, bool]] = {}

    def spawn(
        self, coro: Coroutine[Any, Any, Any], name: str | None = None, *, essential: bool = False
    ) -> asyncio.Task[Any]:
        """Run ``coro`` as a watched task (``name``: for the log and the alert; by default
        the coroutine's)."""
        name = name or getattr(coro, "__qualname__", None) or repr(coro)
        task = asyncio.ensure_future(coro)
        self._tasks[task] = (name, essential)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        name, essential = self._tasks.pop(task, ("?", False))
        if task.cancelled():
            return
        err = task.exception()
        if err is not None:
            log.error("supervisor task %r failed", name, exc_info=err)
            self.report(name, err, essential)

    def report(self, name: str, err: BaseException, essential: bool) -> None:
        """Hand a failure to ``on_failure``; a failure there is logged, never raised."""
        try:
            self._on_failure(name, err, essential)
        except Exception:
            log.exception("reporting the failure of %r failed", name)

    def loop_exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """For ``loop.set_exception_handler``: log what reached it, report an exception."""
        err = context.get("exception")
        where = context.get("task") or context.get("future") or context.get("handle")
        name = where.get_name() if isinstance(where, asyncio.Task) else repr(where) if where else "event loop"
        log.error("unhandled in the event loop (%s): %s", name, context.get("message"), exc_info=err)
        if isinstance(err, Exception):
            loop.call_soon(self.report, name, err, False)

    async def close(self) -> None:
        """Cancel every task still running and wait for them (their exceptions are read)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
