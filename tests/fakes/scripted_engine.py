"""A scripted engine transport: it replays given server messages and records the requests a
client sends, in the spirit of httpx's ``MockTransport``. No supervisor logic: no directive
states, no lifecycle; what a request does to a run is the real supervisor's business (tests of
behaviour run it in process, ``tests.live_supervisor``).

On a ``Hello`` it sends ``welcome`` (its ``last_seq`` the newest scripted event's), the events
after the Hello's ``replay_from``, and to a telemetry client the ``stream`` (samples, hardware);
an ``Error`` as ``welcome`` refuses every Hello and closes, as a supervisor of another version.
Every later message is recorded in ``requests`` and answered with what ``reply`` returns
(default: an empty ``Ok``; a Status gets ``status`` when there is one)::

    async with ScriptedEngine(sock, welcome_for("run-1"), events=[...], stream=[...]) as engine:
        ...
        assert [m.kind for m in engine.requests] == ["stop"]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.chaos.table import KINDS, chaos_specs
from engine.config.run_config import RunConfig
from engine.domain import Event, RunState, RunStatus, TelemetrySample
from engine.events import Payload
from engine.hardware_report import HardwareSnapshot
from engine.wire.protocol import (
    STREAM_LIMIT,
    ClientMessage,
    Error,
    EventMessage,
    Hardware,
    Hello,
    Ok,
    ProtocolError,
    ServerMessage,
    Status,
    Telemetry,
    Welcome,
    decode_client,
    encode,
    read_line,
)

from .run_script import make_event

Reply = Callable[[ClientMessage], Sequence[ServerMessage]]
"""What the engine answers a request with (sent in order)."""


def welcome_for(run_id: str, state: RunState = "running", **over: Any) -> Welcome:
    """A Welcome as a supervisor of a default-config run sends it: its thresholds, every chaos
    kind, and this process as the one that answers (as a live run's pid file names it)."""
    fields: dict[str, Any] = dict(run_id=run_id, state=state, last_seq=0, supervisor_pid=os.getpid())
    fields.update(thresholds=RunConfig().thresholds(), chaos=chaos_specs(list(KINDS)))
    return Welcome(**(fields | over))


def telemetry(samples: Sequence[TelemetrySample], state: RunState = "running") -> list[Telemetry]:
    """Samples as the supervisor streams them."""
    return [Telemetry(sample=sample, state=state) for sample in samples]


def answer_ok(message: ClientMessage) -> list[ServerMessage]:
    """The default reply: an empty ``Ok`` to the request's id."""
    return [Ok(id=getattr(message, "id", None) or "?")]


class ScriptedEngine:
    """Serves ``socket_path`` with the protocol's framing; replays, records, answers as told."""

    def __init__(
        self,
        socket_path: Path | str,
        welcome: Welcome | Error,
        *,
        events: Sequence[Event] = (),
        stream: Sequence[BaseModel] = (),
        reply: Reply = answer_ok,
        status: RunStatus | None = None,
    ) -> None:
        self.socket_path, self.welcome, self.reply, self.status = Path(socket_path), welcome, reply, status
        self.events, self.stream = list(events), list(stream)
        self.hellos: list[Hello] = []
        self.requests: list[ClientMessage] = []
        self._writers: dict[asyncio.StreamWriter, Hello] = {}
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> ScriptedEngine:
        self._server = await asyncio.start_unix_server(self._serve, str(self.socket_path), limit=STREAM_LIMIT)
        return self

    async def close(self) -> None:
        await self.__aexit__()

    async def __aexit__(self, *exc: object) -> None:
        await self.drop_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    @property
    def clients(self) -> int:
        return len(self._writers)

    def send(self, message: BaseModel, *, telemetry_only: bool = False) -> None:
        """``message`` to every client past its Hello (to telemetry clients only if asked)."""
        for writer, hello in list(self._writers.items()):
            if (hello.telemetry or not telemetry_only) and not writer.is_closing():
                writer.write(encode(message))

    def add_event(
        self,
        type: str | Payload | Event = "note",
        message: str | None = None,
        **over: Any,
    ) -> Event:
        """Store an event (given, or built by ``make_event`` with the next seq) and send it to
        every client; a reconnecting client gets it replayed."""
        seq = (self.events[-1].seq if self.events else 0) + 1
        over.setdefault("ts", time.time())
        event = type if isinstance(type, Event) else make_event(seq, type, message, **over)
        self.events.append(event)
        self.send(EventMessage(event=event))
        return event

    def send_telemetry(self, sample: TelemetrySample, state: RunState = "running") -> None:
        self.send(Telemetry(sample=sample, state=state), telemetry_only=True)

    def send_hardware(self, snapshot: HardwareSnapshot) -> None:
        self.send(Hardware(snapshot=snapshot), telemetry_only=True)

    async def drop_connections(self) -> None:
        """Close every client connection; the engine keeps listening."""
        for writer in list(self._writers):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (line := await read_line(reader)) is not None:
                if line.strip():
                    self._handle(writer, decode_client(line))
                    await writer.drain()
        except ProtocolError as err:
            writer.write(encode(Error(id=err.request_id, reason=err.reason)))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.pop(writer, None)
            writer.close()

    def _handle(self, writer: asyncio.StreamWriter, message: ClientMessage) -> None:
        if isinstance(message, Hello) and writer not in self._writers:
            self.hellos.append(message)
            if isinstance(self.welcome, Error):  # a refused Hello: the Error, then the end
                writer.write(encode(self.welcome))
                writer.close()
                return
            self._writers[writer] = message
            last_seq = self.events[-1].seq if self.events else 0
            since = message.replay_from
            replay = [e for e in self.events if since is not None and e.seq > since]
            stream = self.stream if message.telemetry else []
            for out in [self.welcome.model_copy(update={"last_seq": last_seq})] + replay + stream:
                writer.write(encode(EventMessage(event=out) if isinstance(out, Event) else out))
            return
        self.requests.append(message)
        if isinstance(message, Status) and self.status is not None:
            answers: Sequence[ServerMessage] = [Ok(id=message.id, result=self.status.model_dump(mode="json"))]
        else:
            answers = self.reply(message)
        for answer in answers:
            writer.write(encode(answer))

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls, *args: Any, **kwargs: Any) -> Iterator[ScriptedEngine]:
        """Serve on a private event loop in a thread (for synchronous callers such as the CLI)."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        engine = cls(*args, **kwargs)
        asyncio.run_coroutine_threadsafe(engine.__aenter__(), loop).result(10)
        try:
            yield engine
        finally:
            asyncio.run_coroutine_threadsafe(engine.__aexit__(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
