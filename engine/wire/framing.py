"""Framing of the wire protocol: one message a line, at most ``MAX_LINE_BYTES`` with its
newline, and the errors a line that is no message raises. The messages themselves and
their decoding are ``engine.wire.protocol``, which re-exports everything here. Torch-free.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

MAX_LINE_BYTES = 1 << 20  # 1 MiB, newline included


class ProtocolError(ValueError):
    """A line that is not a valid message; ``request_id`` is set when it could be read."""

    def __init__(self, reason: str, request_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request_id = request_id


class LineTooLong(ProtocolError):
    """A line over MAX_LINE_BYTES; the rest of it has been discarded."""


def encode(message: BaseModel) -> bytes:
    """One message as one NDJSON line (UTF-8, newline-terminated)."""
    return message.model_dump_json().encode("utf-8") + b"\n"


def wire_size(line: bytes | str) -> int:
    """The bytes ``line`` takes on the wire: UTF-8, its newline included (counted when the
    caller has already cut it off)."""
    data = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
    return len(data) if data.endswith(b"\n") else len(data) + 1


async def read_line(reader: asyncio.StreamReader) -> bytes | None:
    """Next line without its newline, or None at EOF.

    Raises LineTooLong for a line over MAX_LINE_BYTES (its newline included) after
    discarding the rest of it, so the caller can answer with an Error and keep reading. The
    reader's ``limit`` should be STREAM_LIMIT: asyncio then refuses an over-long line before
    buffering all of it (with a larger limit the line is read whole, then refused here).
    """
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as err:
        line = err.partial  # a last line without newline still counts
        if not line:
            return None
    except asyncio.LimitOverrunError:
        await _discard_line(reader)
        raise LineTooLong(f"line exceeds the {MAX_LINE_BYTES}-byte limit") from None
    if wire_size(line) > MAX_LINE_BYTES:
        raise LineTooLong(f"line exceeds the {MAX_LINE_BYTES}-byte limit")
    return line.removesuffix(b"\n")


async def _discard_line(reader: asyncio.StreamReader) -> None:
    while True:
        try:
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as err:
            await reader.readexactly(err.consumed)
        except asyncio.IncompleteReadError:
            return


# Pass as ``limit=`` to asyncio.open_unix_connection / start_unix_server. asyncio's limit
# counts the bytes before the newline: MAX_LINE_BYTES - 1 of them and the newline make the
# longest line, and the last line of a stream (no newline) may have as many.
STREAM_LIMIT = MAX_LINE_BYTES - 1
