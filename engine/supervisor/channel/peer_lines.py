"""Reading a peer's lines: every valid message in turn, each bad line answered with an
``Error`` naming the reason (and noted in the connection's ``BadInputLog``), and a last
word before hanging up. The conversation goes on after a bad line. Torch-free."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from pydantic import BaseModel

from engine.supervisor.channel.bad_input_log import BadInputLog
from engine.wire.protocol import (
    ClientMessage,
    Error,
    LineTooLong,
    ProtocolError,
    decode_client,
    encode,
    read_line,
)


async def decoded_lines(
    reader: asyncio.StreamReader, reply: Callable[[BaseModel], None], bad: BadInputLog
) -> AsyncIterator[ClientMessage]:
    """Valid messages from ``reader`` until EOF; each bad line is answered with an Error.

    An over-long line, malformed JSON, an unknown kind or wrong types cost the peer one
    ``Error`` naming the reason (and a note in ``bad``); the connection goes on.
    """
    while True:
        try:
            line = await read_line(reader)
        except LineTooLong as err:
            refuse(reply, bad, err)
            continue
        except (ConnectionError, OSError):
            return
        if line is None:
            return
        if not line.strip():
            continue
        try:
            message = decode_client(line)
        except ProtocolError as err:
            refuse(reply, bad, err)
            continue
        yield message


def refuse(reply: Callable[[BaseModel], None], bad: BadInputLog, err: ProtocolError) -> None:
    """Answer a bad input with an Error naming the reason, and note it for the log."""
    bad.note(err.reason)
    reply(Error(id=err.request_id, reason=err.reason))


async def say_and_close(writer: asyncio.StreamWriter, message: BaseModel) -> None:
    """One last message (within 1 s), then close."""
    with contextlib.suppress(Exception):
        writer.write(encode(message))
        await asyncio.wait_for(writer.drain(), 1.0)
    writer.close()
