"""The trainer's connection as the supervisor holds it (and the seat that says which one is
connected now): commands go out, its lines come in.

Writes never wait: a trainer that stops reading gets no more answers once its unread
bytes pass ``TRAINER_WRITE_BUFFER_MAX``, rather than costing the supervisor memory.
Torch-free.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from engine.wire.protocol import MAX_LINE_BYTES, encode

TRAINER_WRITE_BUFFER_MAX = MAX_LINE_BYTES  # bytes unread by the trainer before we stop answering


class TrainerLink:
    """The connected trainer: ``send`` to it; ``closed`` is set once it disconnected."""

    def __init__(self, writer: asyncio.StreamWriter, pid: int | None) -> None:
        self.writer = writer
        self.pid = pid
        """The peer's pid (SO_PEERCRED), if the platform says."""
        self.closed = asyncio.Event()

    def send(self, message: BaseModel) -> None:
        if self.writer.is_closing():
            return
        if self.writer.transport.get_write_buffer_size() > TRAINER_WRITE_BUFFER_MAX:
            return  # a trainer that reads nothing gets no more answers, rather than our memory
        self.writer.write(encode(message))


class TrainerSeat:
    """Who holds the trainer's end of the socket now: its link while one is connected, None
    between trainers. The connection server seats and unseats it; the parts that talk to the
    trainer (the directives, the attempts, the chaos desk) read it."""

    def __init__(self) -> None:
        self.link: TrainerLink | None = None

    def current(self) -> TrainerLink | None:
        return self.link

    def send(self, message: BaseModel) -> bool:
        """Send ``message`` to the connected trainer; False if none is connected now."""
        if self.link is None:
            return False
        self.link.send(message)
        return True
