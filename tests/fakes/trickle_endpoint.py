"""An HTTP endpoint on 127.0.0.1 that answers slowly enough to starve a careless client.

For each request it reads the request (head and body), sends ``HTTP/1.1 200 OK`` headers
with a large ``Content-Length``, then one byte of the body every ``interval_s`` seconds: a
client whose timeout is per read never times out. Bounded: a connection ends by itself
after ``max_bytes`` body bytes, and ``close()`` (leaving the ``async with``) drops every
connection still open. It counts the connections it accepted (``connections``), those
still open (``open``), and those the client hung up on before the trickle ended
(``hung_up``): a client that keeps a hung exchange alive shows as ``open``.

Used by the planner tests and by ``bench/planner_trickle.py``. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

BODY_BYTES = 1_000_000  # the Content-Length it promises (never sent in full)


class TrickleEndpoint:
    """``async with TrickleEndpoint() as endpoint``: ``endpoint.url`` is a chat-completions base URL."""

    def __init__(self, interval_s: float = 1.0, max_bytes: int = 600) -> None:
        self.interval_s = interval_s  # s between two body bytes
        self.max_bytes = max_bytes  # body bytes sent before it ends a connection by itself
        self.connections = 0
        self.open = 0
        self.hung_up = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> TrickleEndpoint:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def close(self) -> None:
        """Stop listening, drop every open connection (a stuck reader gets its EOF), and wait
        for the connections' handlers to end."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self._writers.add(writer)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {BODY_BYTES}\r\n\r\n".encode()
            )
            await writer.drain()
            hang_up = asyncio.ensure_future(reader.read())  # b"" (or a reset) once the client closes
            try:
                for _ in range(self.max_bytes):
                    done, _ = await asyncio.wait({hang_up}, timeout=self.interval_s)
                    if done:
                        self.hung_up += 1
                        return
                    writer.write(b" ")
                    await writer.drain()
            finally:
                hang_up.cancel()
                if hang_up.done() and not hang_up.cancelled():
                    hang_up.exception()  # read, so asyncio does not report it
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client went away mid-request, or sent nonsense: nothing to answer
        finally:
            self.open -= 1
            self._writers.discard(writer)
            self._handlers.discard(handler)  # type: ignore[arg-type]
            with contextlib.suppress(Exception):
                writer.transport.abort()
