"""A command planner's stdout as one reply per ask.

The JSON-lines protocol has no request ids: a reply is known only by when it comes. So a
reader task reads the command's stdout for as long as the command runs, and hands each
line to the ask waiting for one: the first line after an ask's request is that ask's
reply, and the ask stops waiting. Any other line (a second line after a reply, a line
while no ask waits) is discarded and counted (``stray``; logged at the 1st, 2nd, 4th,
8th... so a chatty command cannot flood the log), never kept for a later ask, whose
reply would then be judged against the wrong telemetry. Before an ask registers, the
reader gets a turn, so a line already delivered to the loop is read as stray, not as
that ask's reply. A line over the reader's limit is read, dropped, and answers its ask as
``OversizedLine``. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

SHOWN_CHARS = 80  # of a discarded line, in the log


class OversizedLine(Exception):
    """A reply line over the reader's limit (its bytes were read and dropped)."""


class ReplyLines:
    """Reads ``reader`` in a task of its own from creation (on a running loop) to ``close``."""

    def __init__(self, reader: asyncio.StreamReader, source: str) -> None:
        self.source = source
        self.stray = 0
        """Lines discarded because no ask was waiting for them."""
        self._reader = reader
        self._waiting: asyncio.Future[bytes] | None = None
        self._ended = False  # the stream ended (the command exited or closed its stdout)
        self._task = asyncio.ensure_future(self._read())

    async def reply_to(self, send: Callable[[], Awaitable[None]]) -> bytes:
        """Send one request (``send``) and return the first line that comes after it.

        EOFError when the stream ends first; OversizedLine for a line over the limit.
        Cancelling it (a deadline) leaves no ask waiting: a late reply is stray."""
        await asyncio.sleep(0)  # the reader's turn: a line delivered before this ask is not its reply
        if self._ended:
            raise EOFError("stream ended")
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting = future
        try:
            await send()
            return await future
        finally:
            if self._waiting is future:
                self._waiting = None
            if not future.cancel() and not future.cancelled():
                future.exception()  # done: read, so asyncio never reports it as unretrieved

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task

    async def _read(self) -> None:
        while True:
            try:
                line: bytes | Exception = await bounded_line(self._reader)
            except OversizedLine as err:
                line = err
            except (EOFError, OSError):
                self._ended = True
                waiting, self._waiting = self._waiting, None
                if waiting is not None and not waiting.done():
                    waiting.set_exception(EOFError("stream ended"))
                return
            self._deliver(line)

    def _deliver(self, line: bytes | Exception) -> None:
        """To the waiting ask, if any (it stops waiting); else discarded as stray."""
        waiting, self._waiting = self._waiting, None
        if waiting is not None and not waiting.done():
            if isinstance(line, Exception):
                waiting.set_exception(line)
            else:
                waiting.set_result(line)
            return
        self.stray += 1
        if self.stray & (self.stray - 1) == 0:  # 1, 2, 4, 8...: a count, never a flood
            shown = "(a line over the limit)" if isinstance(line, Exception) else repr(line[:SHOWN_CHARS])
            log.warning(
                "planner %s: discarded a line outside an ask (%d so far): %s", self.source, self.stray, shown
            )


async def bounded_line(reader: asyncio.StreamReader) -> bytes:
    """The next line, at most the reader's limit; a longer one is drained and refused.

    EOFError when the stream ends before a line (the command exited)."""
    oversized = False
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as err:
            try:
                await reader.readexactly(err.consumed)  # drop the over-long part, keep reading
            except asyncio.IncompleteReadError:
                raise EOFError("stream ended") from None
            oversized = True
            continue
        except asyncio.IncompleteReadError as err:
            if oversized or not err.partial:
                raise EOFError("stream ended") from None
            line = err.partial  # a last line without its newline
        if oversized:
            raise OversizedLine
        return line
