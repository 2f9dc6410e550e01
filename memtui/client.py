"""The console's side of the wire: one asynchronous connection to a run's ``engine.sock``.

``EngineClient`` says ``Hello``, reads the ``Welcome``, then hands every server message
(``Telemetry``, ``EventMessage``, unmatched ``Ok``/``Error``) to a callback, or to
``messages()`` when there is none. ``request`` matches replies by request id. When the
socket drops it reconnects with exponential backoff and asks for every event after the
newest seq it has seen, so a reconnect neither loses nor repeats an event.

``request_once`` is the CLI's synchronous one-shot: connect, request, close; ``welcome_once``
only reads the Welcome (e.g. the chaos kinds a supervisor performs).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Literal

from engine.wire.protocol import (
    PROTOCOL_VERSION,
    STREAM_LIMIT,
    Approve,
    Chaos,
    Clamp,
    Error,
    EventMessage,
    Hello,
    Ok,
    Pause,
    Ping,
    Propose,
    ProtocolError,
    Reject,
    Replay,
    Role,
    ServerMessage,
    Status,
    Stop,
    Telemetry,
    Welcome,
    decode_server,
    encode,
    read_line,
)

ConnectionState = Literal["connecting", "connected", "disconnected"]
Request = Status | Stop | Pause | Ping | Replay | Approve | Clamp | Reject | Chaos | Propose
MessageCallback = Callable[[ServerMessage], None]
StateCallback = Callable[[ConnectionState], None]

BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 5.0


def client_name(role: str) -> str:
    """What the supervisor logs about us, e.g. ``memtui 0.1.0 console``."""
    from memtui import __version__

    return f"memtui {__version__} {role}"


def new_request_id() -> str:
    return uuid.uuid4().hex


class EngineUnavailable(ConnectionError):
    """No supervisor answers on the socket, or the connection dropped mid-request."""


class EngineRefused(RuntimeError):
    """The supervisor answered a request (or our Hello) with an ``Error``."""

    def __init__(self, reason: str, request_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request_id = request_id


class EngineClient:
    """A console's connection to one supervisor, kept alive across drops."""

    def __init__(
        self,
        socket_path: Path | str,
        *,
        role: Role = "console",
        telemetry: bool = True,
        replay_from: int | None = 0,
        on_message: MessageCallback | None = None,
        on_state: StateCallback | None = None,
        backoff_initial: float = BACKOFF_INITIAL_S,
        backoff_max: float = BACKOFF_MAX_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.role: Role = role
        self.telemetry = telemetry
        self.last_seq: int | None = replay_from
        """Newest event seq seen; the next Hello replays everything after it."""
        self.welcome: Welcome | None = None
        """The newest Welcome (run id, state, last_seq when we joined)."""
        self.state: ConnectionState = "disconnected"
        self.newest_data_at: float | None = None
        """``clock()`` when the newest telemetry or event arrived."""
        self._on_message = on_message
        self._on_state = on_state
        self._backoff = (backoff_initial, backoff_max)
        self._clock = clock
        self._queue: asyncio.Queue[ServerMessage] = asyncio.Queue()
        self._pending: dict[str, asyncio.Future[Ok]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._connected = asyncio.Event()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> Welcome:
        """One attempt: open the socket, say Hello, read the Welcome."""
        self._set_state("connecting")
        try:
            reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=STREAM_LIMIT)
        except OSError as err:
            self._set_state("disconnected")
            raise EngineUnavailable(f"no supervisor at {self.socket_path}: {err.strerror or err}") from None
        try:
            welcome = await self._handshake(reader, writer)
        except BaseException:
            writer.close()
            self._set_state("disconnected")
            raise
        self._reader, self._writer = reader, writer
        self._connected.set()
        self._set_state("connected")
        self._dispatch(welcome)
        return welcome

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Welcome:
        hello = Hello(
            protocol=PROTOCOL_VERSION,
            role=self.role,
            client=client_name(self.role),
            replay_from=self.last_seq,
            telemetry=self.telemetry,
        )
        writer.write(encode(hello))
        await writer.drain()
        line = await read_line(reader)
        if line is None:
            raise EngineUnavailable("the supervisor closed the connection before its welcome")
        reply = decode_server(line)
        if isinstance(reply, Error):
            raise EngineRefused(reply.reason)
        if not isinstance(reply, Welcome):
            raise ProtocolError(f"expected a welcome, got {reply.kind!r}")
        return reply

    async def run(self, *, reconnect: bool = True) -> None:
        """Connect and dispatch until ``close()``; on a drop, back off and reconnect.

        An ``EngineRefused`` handshake (e.g. a protocol version mismatch) is final and raised.
        """
        delay = self._backoff[0]
        while not self._closed:
            try:
                if self._writer is None:
                    await self.connect()
                delay = self._backoff[0]
                await self._read_until_eof()
            except (EngineUnavailable, OSError, ProtocolError):
                pass
            self._drop_connection()
            if self._closed or not reconnect:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    async def close(self) -> None:
        """Stop reconnecting and close the socket. Never sends Stop: the run goes on."""
        self._closed = True
        writer = self._writer
        self._drop_connection()
        if writer is not None:
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def __aenter__(self) -> EngineClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ requests

    async def request(self, message: Request, timeout: float = 10.0) -> Ok:
        """Send one command and wait for its ``Ok``; an ``Error`` reply raises EngineRefused."""
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except asyncio.TimeoutError:
            raise EngineUnavailable(f"not connected to {self.socket_path}") from None
        if self._writer is None:  # dropped while the wait above handed control back
            raise EngineUnavailable(f"connection to {self.socket_path} dropped")
        future: asyncio.Future[Ok] = asyncio.get_running_loop().create_future()
        self._pending[message.id] = future
        try:
            self._writer.write(encode(message))
            await self._writer.drain()
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise EngineUnavailable(f"no answer to {message.kind} within {timeout:g}s") from None
        except OSError as err:
            raise EngineUnavailable(f"connection lost: {err}") from None
        finally:
            self._pending.pop(message.id, None)

    async def status(self) -> Ok:
        return await self.request(Status(id=new_request_id()))

    async def stop(self, reason: str = "operator") -> Ok:
        return await self.request(Stop(id=new_request_id(), reason=reason))

    async def ping(self) -> Ok:
        return await self.request(Ping(id=new_request_id()))

    # ------------------------------------------------------------------ incoming

    async def messages(self) -> AsyncIterator[ServerMessage]:
        """Server messages in arrival order, when no ``on_message`` callback was given."""
        while True:
            yield await self._queue.get()

    async def _pump(self) -> None:
        """Dispatch until the supervisor closes the connection, then mark it dropped."""
        try:
            await self._read_until_eof()
        except (OSError, ProtocolError):
            pass
        finally:
            self._drop_connection()

    async def _read_until_eof(self) -> None:
        assert self._reader is not None
        while True:
            try:
                line = await read_line(self._reader)
            except ProtocolError:
                continue  # an over-long line was discarded; the rest of the stream is fine
            if line is None:
                return
            try:
                message = decode_server(line)
            except ProtocolError:
                continue  # a newer supervisor's message we do not know; skip it
            self._dispatch(message)

    def _dispatch(self, message: ServerMessage) -> None:
        if isinstance(message, (Ok, Error)) and message.id in self._pending:
            self._settle(message)
            return
        if isinstance(message, EventMessage):
            seq = message.event.seq
            if self.last_seq is not None and seq <= self.last_seq:
                return  # already seen (replay overlapping live delivery)
            self.last_seq = seq
        if isinstance(message, Welcome):
            self.welcome = message
            if self.last_seq is not None and message.last_seq < self.last_seq:
                # Events we saw that its store never kept (their supervisor exited while its
                # disk refused writes): the new ones are numbered from the store's newest.
                self.last_seq = message.last_seq
        if isinstance(message, (Telemetry, EventMessage)):
            self.newest_data_at = self._clock()
        if self._on_message is not None:
            self._on_message(message)
        else:
            self._queue.put_nowait(message)

    def _settle(self, message: Ok | Error) -> None:
        assert message.id is not None
        future = self._pending.pop(message.id)
        if future.done():
            return
        if isinstance(message, Ok):
            future.set_result(message)
        else:
            future.set_exception(EngineRefused(message.reason, message.id))

    def _drop_connection(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._connected.clear()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(EngineUnavailable("connection to the supervisor dropped"))
        self._pending.clear()
        self._set_state("disconnected")

    def _set_state(self, state: ConnectionState) -> None:
        if state == self.state:
            return
        self.state = state
        if self._on_state is not None:
            self._on_state(state)


# ------------------------------------------------------------------------ one-shot


def request_once(socket_path: Path | str, message: Request, timeout: float = 10.0) -> Ok:
    """Synchronously: connect (no telemetry, no replay), send ``message``, return its Ok."""
    return asyncio.run(_request_once(Path(socket_path), message, timeout))


SOCKET_BACK_S = 5.0
"""Seconds a one-shot request waits for the socket of a live supervisor to be bound again
(deleted from under it: the supervisor looks every 2 s, ``engine.supervisor.channel.connections``)."""


async def _connect_once(client: EngineClient, socket_path: Path, timeout: float) -> Welcome:
    """``client.connect()``; while the socket file is missing and the run directory's
    supervisor is alive, tried again for up to ``SOCKET_BACK_S``."""
    from engine.run.directory import RunDir

    deadline = time.monotonic() + SOCKET_BACK_S
    while True:
        try:
            return await asyncio.wait_for(client.connect(), timeout)
        except EngineUnavailable:
            served = RunDir(socket_path.parent).supervisor_pid() is not None
            if socket_path.exists() or not served or time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.1)


async def _request_once(socket_path: Path, message: Request, timeout: float) -> Ok:
    client = EngineClient(socket_path, role="cli", telemetry=False, replay_from=None)
    try:
        await _connect_once(client, socket_path, timeout)
    except asyncio.TimeoutError:
        await client.close()
        raise EngineUnavailable(f"no welcome from {socket_path} within {timeout:g}s") from None
    reader = asyncio.ensure_future(client._pump())
    try:
        return await client.request(message, timeout)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await client.close()


def welcome_once(socket_path: Path | str, timeout: float = 10.0) -> Welcome:
    """Synchronously: connect, read the supervisor's Welcome (what it is, what it offers), close."""
    return asyncio.run(_welcome_once(Path(socket_path), timeout))


async def _welcome_once(socket_path: Path, timeout: float) -> Welcome:
    client = EngineClient(socket_path, role="cli", telemetry=False, replay_from=None)
    try:
        return await _connect_once(client, socket_path, timeout)
    except asyncio.TimeoutError:
        raise EngineUnavailable(f"no welcome from {socket_path} within {timeout:g}s") from None
    finally:
        await client.close()
