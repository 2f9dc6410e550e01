"""Waiting in tests: poll a condition until it holds, or fail saying what was awaited.

A test never sleeps a fixed time in the hope that something has happened by then: it waits
for the thing itself. The wait ends as soon as the condition holds, so timeouts are
generous (the CI machine is shared: seconds become tens of seconds under load); they only
bound how long a broken feature takes to fail.

``wait_for`` blocks (processes, files, threads); ``until`` is the same for event-loop tests
(it yields to the loop between polls, so the code under test runs meanwhile)::

    step = wait_for(lambda: store.latest_step(), timeout=60, what="the first stored step")
    await until(lambda: app.view.step == 5, what="step 5", seen=lambda: app.view.step)
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

PROCESS_TIMEOUT_S = 60.0
"""Default for ``wait_for``: what it waits on usually involves another process."""
LOOP_TIMEOUT_S = 20.0
"""Default for ``until``: in-process work on the test's own event loop."""
CLI_POLL_S = 0.5
"""``every_s`` for a predicate that runs the CLI (``memtui status``): each look is a Python
start, a third of a second of a core, and back to back they take a core from the trainer
the test waits on (on 2 cores, one busy process stretches its steps many times over)."""


def describe(predicate: Callable[[], Any]) -> str:
    """A predicate's source (a lambda's line), for a failure that did not say what it awaited."""
    try:
        source = inspect.getsource(predicate)
    except (OSError, TypeError):
        return getattr(predicate, "__qualname__", repr(predicate))
    return " ".join(source.split())[:300]


class _Probe:
    """One poll of ``predicate``: its value, or the exception it raised (when tolerated)."""

    def __init__(
        self,
        predicate: Callable[[], T],
        seen: Callable[[], Any] | None,
        ignoring: tuple[type[BaseException], ...],
    ) -> None:
        self.predicate = predicate
        self.seen = seen
        self.ignoring = ignoring
        self.last: Any = "<never polled>"

    def poll(self) -> Any:
        try:
            value = self.predicate()
        except self.ignoring as err:
            self.last = err
            return None
        self.last = value
        return value

    def failure(self, timeout: float, what: str | None) -> AssertionError:
        what = what or f"`{describe(self.predicate)}`"
        last = self.last
        if self.seen is not None:
            try:
                last = self.seen()
            except Exception as err:  # the report must not hide the timeout
                last = f"<seen() raised {err!r}>"
        return AssertionError(f"timed out after {timeout:g} s waiting for {what}; last seen: {last!r}")


def wait_for(
    predicate: Callable[[], T],
    *,
    timeout: float = PROCESS_TIMEOUT_S,
    what: str | None = None,
    seen: Callable[[], Any] | None = None,
    every_s: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate()`` every ``every_s`` s until it is truthy; return that value.

    After ``timeout`` s, raise AssertionError naming ``what`` (default: the predicate's
    source) and the last value seen: the predicate's last result, or ``seen()`` when given
    (say, the state the predicate looks at). Exceptions of the ``ignoring`` types (e.g. a
    file not written yet) count as "not yet".
    """
    probe = _Probe(predicate, seen, ignoring)
    deadline = time.monotonic() + timeout
    while True:
        value = probe.poll()
        if value:
            return value  # type: ignore[no-any-return]
        if time.monotonic() >= deadline:
            raise probe.failure(timeout, what)
        time.sleep(every_s)


async def until(
    predicate: Callable[[], T],
    *,
    timeout: float = LOOP_TIMEOUT_S,
    what: str | None = None,
    seen: Callable[[], Any] | None = None,
    every_s: float = 0.01,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """``wait_for`` for event-loop tests: the loop runs other tasks between polls."""
    probe = _Probe(predicate, seen, ignoring)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe.poll()
        if value:
            return value  # type: ignore[no-any-return]
        if loop.time() >= deadline:
            raise probe.failure(timeout, what)
        await asyncio.sleep(every_s)


def is_event(kind: str, attempt: int | None = None) -> Any:
    """A predicate over a console's messages: an event of ``kind`` (of ``attempt``, if given)."""

    def match(message: Any) -> bool:
        return (
            message.kind == "event"
            and message.event.type == kind
            and (attempt is None or message.event.attempt == attempt)
        )

    return match
