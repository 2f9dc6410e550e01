"""The supervisor's socket: who may connect, the hello, and the conversations that follow.

Every connection is checked (peer credentials: only the run's owner), then must say hello
within ``HELLO_TIMEOUT_S``. A console gets a welcome, the history it asks for (replayed
from the store, paced by its outbox) and answers to its requests; the one trainer gets a
welcome and the commands it missed, and reports steps and events. What each side may say
is a table from message type to handler; anything else is answered with an ``Error`` and
the conversation goes on. Every bad input (and a missing hello, a foreign uid) is also
logged with the peer's pid and uid, rate-limited per connection (``BadInputLog``). What a
console's requests do to the run is the ``Served`` run's business (the ``Supervisor``); what
the trainer reports goes straight to its owner (``ReportOwner``: ``TrainerReports``), and the
trainer connected now sits in the ``TrainerSeat``. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.chaos.table import ChaosKindSpec
from engine.directives.pacer import DirectivePacer
from engine.domain import Thresholds
from engine.events import PAYLOADS, SUPERVISOR_EVENTS
from engine.run.storage.store import Store
from engine.supervisor.channel import peer
from engine.supervisor.channel.bad_input_log import BadInputLog, LogBudget
from engine.supervisor.channel.console_outbox import ConsoleClient
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.channel.peer_lines import decoded_lines, refuse, say_and_close
from engine.supervisor.channel.served import DirectiveRequest, ReportOwner, Served
from engine.supervisor.channel.trainer_link import TrainerLink, TrainerSeat
from engine.wire.json_codec import shorten
from engine.wire.protocol import (
    STREAM_LIMIT,
    Approve,
    Chaos,
    Clamp,
    ClientMessage,
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
    Status,
    StepReport,
    Stop,
    TrainerEvent,
    Welcome,
    check_hello,
    decode_client,
    read_line,
)

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 10.0  # s a new connection has to say hello
SOMAXCONN_FILE = Path("/proc/sys/net/core/somaxconn")  # Linux: the kernel's cap on a listen backlog
REPLAY_PAGE = 256  # events read from the store per replay page
SOCKET_CHECK_S = 2.0  # s between looks at the socket file: a deleted one is bound again within this


def listen_backlog() -> int:
    """The most pending connections the kernel will queue (``net.core.somaxconn``): a burst
    of connects waits for its accept instead of being refused."""
    try:
        return max(socket.SOMAXCONN, int(SOMAXCONN_FILE.read_text()))
    except (OSError, ValueError):
        return socket.SOMAXCONN


ConsoleHandler = Callable[[ConsoleClient, Any], Awaitable[None]]
TrainerHandler = Callable[[TrainerLink, Any], None]


# ----------------------------------------------------------------------- the server


class ConnectionServer:
    """``engine.sock``: accepts consoles and the trainer, and converses with each."""

    def __init__(
        self,
        served: Served,
        reports: ReportOwner,
        seat: TrainerSeat,
        store: Store,
        consoles: Consoles,
        *,
        run_id: str,
        owner_uid: int,
        thresholds: Thresholds,
        chaos: list[ChaosKindSpec] | None = None,
        on_failure: Callable[[str, BaseException, bool], None] | None = None,
    ) -> None:
        self.served = served
        self.reports = reports
        """Takes the trainer's greeting, steps and events."""
        self.seat = seat
        """The connected trainer, if any: seated here, read by the parts that talk to it."""
        self.on_failure = on_failure
        """Told of a conversation that failed unexpectedly (its name, the exception, False)."""
        self.store = store
        self.consoles = consoles
        self.run_id = run_id
        self.thresholds = thresholds
        self.chaos = list(chaos or [])
        """The chaos kinds the run performs, told to every console in its Welcome."""
        """The run's memory levels and loss-scale floor: consoles colour by them."""
        self.owner_uid = owner_uid
        """Only peers of this uid may connect."""
        self._server: asyncio.AbstractServer | None = None
        self._path: Path | None = None
        self._bound: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket file we bound
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pacer = DirectivePacer()  # paces directive requests from all consoles together
        self._log_budget = LogBudget()  # bad-input log lines, all connections together
        self._console_handlers: dict[type[BaseModel], ConsoleHandler] = {
            Status: self._status,
            Ping: self._ping,
            Stop: self._stop,
            Pause: self._pause,
            Replay: self._replay_request,
            Chaos: self._chaos,
            Approve: self._directive,
            Clamp: self._directive,
            Reject: self._directive,
            Propose: self._directive,
            Hello: self._hello_again,
        }
        self._trainer_handlers: dict[type[BaseModel], TrainerHandler] = {
            StepReport: self._step,
            TrainerEvent: self._trainer_event,
            Ping: self._trainer_ping,
        }

    async def listen(self, path: Path) -> None:
        """Serve ``path`` (mode 0600); a socket file left there is stale (we own the run's lock)."""
        if path.exists() or path.is_symlink():
            path.unlink()
        self._server = await asyncio.start_unix_server(
            self._on_connect, path=str(path), limit=STREAM_LIMIT, backlog=listen_backlog()
        )
        self._path = path
        bound = path.lstat()
        self._bound = (bound.st_dev, bound.st_ino)
        path.chmod(0o600)  # the 0700 run dir already covers the moment before this

    def socket_gone(self) -> bool:
        """Whether the socket file we bound was removed (an ``rm engine.sock``, a cleaner of
        the directory): then nothing can connect to this run. A file someone else put in its
        place is theirs, and is left alone."""
        if self._path is None or self._bound is None:
            return False
        return not (self._path.exists() or self._path.is_symlink())

    async def keep_bound(self, restored: Callable[[], None]) -> None:
        """Every SOCKET_CHECK_S, bind the socket again if it was removed, and call ``restored``."""
        while not self._closing:
            await asyncio.sleep(SOCKET_CHECK_S)
            if self.socket_gone() and not self._closing:
                await self.listen_again()
                log.warning("%s was removed: listening there again", self._path)
                restored()

    async def listen_again(self) -> None:
        """Bind the path anew; the connections already open go on (only accepting stops)."""
        assert self._path is not None
        if self._server is not None:
            self._server.close()
        await self.listen(self._path)
        if self._closing and self._server is not None:  # closed while binding: leave no socket
            self._server.close()
            self._remove_socket()

    async def close(self) -> None:
        """Stop listening, remove our socket, close every connection."""
        self._closing = True  # the socket watch must not bind it again
        if self._server is not None:
            self._server.close()
            self._remove_socket()
        await self.consoles.close()
        if self.seat.link is not None:
            self.seat.link.writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _remove_socket(self) -> None:
        """Unlink the socket file if it is still the one we bound: one found there instead
        (another supervisor's) is left alone."""
        if self._path is None or self._bound is None:
            return
        with contextlib.suppress(FileNotFoundError):
            found = self._path.lstat()
            if (found.st_dev, found.st_ino) == self._bound:
                self._path.unlink()

    # -------------------------------------------------------------- any connection

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._converse(reader, writer)
        except asyncio.CancelledError:
            pass
        except Exception as err:
            log.exception("connection handler failed")
            self._failed("connection handler", err)
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        creds = peer.peer_credentials(writer.get_extra_info("socket"))
        bad = BadInputLog(creds, self._log_budget)
        try:
            refused = peer.refusal(creds, self.owner_uid)
            if refused is not None:
                bad.note(f"connection {refused}")
                await say_and_close(writer, Error(reason=refused))
                return
            hello = await self._read_hello(reader, writer, bad)
            if hello is None:
                return
            bad.role = hello.role
            if hello.role == "trainer":
                await self._serve_trainer(reader, writer, creds.pid if creds else None, bad)
            else:
                await self._serve_console(hello, reader, writer, bad)
        finally:
            bad.close()

    async def _read_hello(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bad: BadInputLog
    ) -> Hello | None:
        try:
            line = await asyncio.wait_for(read_line(reader), HELLO_TIMEOUT_S)
            if line is None:
                bad.note("closed the connection without a hello")
                return None
            return check_hello(decode_client(line))
        except ProtocolError as err:
            bad.note(err.reason)
            await say_and_close(writer, Error(id=err.request_id, reason=err.reason))
        except asyncio.TimeoutError:
            reason = f"no hello within {HELLO_TIMEOUT_S:.0f} s"
            bad.note(reason)
            await say_and_close(writer, Error(reason=reason))
        except (ConnectionError, OSError):
            pass
        return None

    def _welcome(self) -> Welcome:
        return Welcome(
            supervisor_pid=os.getpid(),  # the CLI that started us checks it is us that answers
            run_id=self.run_id,
            state=self.served.state,
            last_seq=self.store.last_seq(),
            thresholds=self.thresholds,
            chaos=self.chaos,
        )

    # ------------------------------------------------------------------- consoles

    async def _serve_console(
        self, hello: Hello, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bad: BadInputLog
    ) -> None:
        client = ConsoleClient(writer, hello)
        # No await between reading last_seq and joining the fan-out: nothing can slip between.
        welcome = self._welcome()
        client.send(welcome)
        client.sent_seq = welcome.last_seq
        self.consoles.add(client)
        latest, hardware = self.served.latest, self.served.hardware()
        if latest is not None:
            client.offer_telemetry(latest, self.served.state)
        if hardware is not None:
            client.offer_hardware(hardware)
        try:
            if hello.replay_from is not None:
                await self._replay(client, hello.replay_from)
            async for message in decoded_lines(reader, client.send, bad):
                if client.closed:
                    return
                handler = self._console_handlers.get(type(message), self._trainer_only)
                try:
                    await handler(client, message)
                except ProtocolError as err:  # a handler's refusal: the peer sent what it may not
                    refuse(client.send, bad, err)
        finally:
            self.consoles.discard(client)
            await client.close()

    async def _replay(self, client: ConsoleClient, since: int) -> int:
        """Queue every stored event with seq > since, paced by the client; returns how many.

        Live events arriving meanwhile are held and released after, de-duplicated by seq.
        """
        client.hold_live()
        # A client that claims more than the store holds (a stale seq from elsewhere) gets
        # live events from the store's newest on, not silence until it catches up.
        cursor, count = min(since, self.store.last_seq()), 0
        try:
            while not client.closed:
                page = self.store.events_since(cursor, REPLAY_PAGE)
                if not page:
                    break
                for event in page:
                    client.send(EventMessage(event=event))
                cursor, count = page[-1].seq, count + len(page)
                await client.wait_room()
        finally:
            client.release_live(cursor)
        return count

    async def _status(self, client: ConsoleClient, message: Status) -> None:
        client.send(Ok(id=message.id, result=self.served.status().model_dump(mode="json")))

    async def _ping(self, client: ConsoleClient, message: Ping) -> None:
        client.send(Ok(id=message.id, result={"time": time.time()}))

    async def _stop(self, client: ConsoleClient, message: Stop) -> None:
        state = self.served.request_stop(message.reason)
        client.send(Ok(id=message.id, result={"state": state}))

    async def _pause(self, client: ConsoleClient, message: Pause) -> None:
        client.send(self.served.request_pause(message.paused, message.reason, message.id))

    async def _replay_request(self, client: ConsoleClient, message: Replay) -> None:
        count = await self._replay(client, message.since)
        client.send(Ok(id=message.id, result={"replayed": count}))

    async def _chaos(self, client: ConsoleClient, message: Chaos) -> None:
        client.send(self.served.chaos(message))

    async def _directive(self, client: ConsoleClient, message: DirectiveRequest) -> None:
        wait_s = self._pacer.delay()  # a flood must not starve the trainer
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        client.send(self.served.directive_request(message))

    async def _hello_again(self, client: ConsoleClient, message: Hello) -> None:
        raise ProtocolError("hello already received on this connection")

    async def _trainer_only(self, client: ConsoleClient, message: ClientMessage) -> None:
        raise ProtocolError(f"{message.kind!r} is accepted only from the trainer")

    # -------------------------------------------------------------------- trainer

    async def _serve_trainer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pid: int | None, bad: BadInputLog
    ) -> None:
        if self.seat.link is not None:
            refusal = f"a trainer is already connected (pid {self.seat.link.pid})"
            bad.note(refusal)
            await say_and_close(writer, Error(reason=refusal))
            return
        link = self.seat.link = TrainerLink(writer, pid)
        log.info("trainer connected (pid %s)", pid)
        link.send(self._welcome())
        self.reports.greet(link)
        try:
            async for message in decoded_lines(reader, link.send, bad):
                handler = self._trainer_handlers.get(type(message), self._not_from_trainer)
                try:
                    handler(link, message)
                except ProtocolError as err:  # a handler's refusal: the peer sent what it may not
                    refuse(link.send, bad, err)
                except Exception as err:  # one report lost, not the trainer's connection
                    log.exception("the trainer's %s failed in the supervisor", message.kind)
                    self._failed(f"trainer {message.kind}", err)
        finally:
            link.closed.set()
            if self.seat.link is link:
                self.seat.link = None
            log.info("trainer disconnected (pid %s)", pid)

    def _failed(self, name: str, err: BaseException) -> None:
        if self.on_failure is not None:
            self.on_failure(name, err, False)

    def _step(self, link: TrainerLink, message: StepReport) -> None:
        self.reports.on_step(message.sample)

    def _trainer_event(self, link: TrainerLink, message: TrainerEvent) -> None:
        """A trainer's event: one of the supervisor's own types is refused, a known type's data
        must fit its payload (an Error names the field), an unknown type is recorded as sent."""
        if message.type in SUPERVISOR_EVENTS:
            raise ProtocolError(f"event type {message.type!r} is the supervisor's to record")
        model = PAYLOADS.get(message.type)
        try:
            payload = None if model is None else model.model_validate(message.data)
        except ValidationError as err:
            first = err.errors(include_url=False, include_input=False)[0]
            where = shorten(".".join(str(p) for p in first["loc"]) or "(data)")
            raise ProtocolError(f"{message.type}: data.{where}: {shorten(first['msg'], 200)}") from None
        self.reports.on_event(message, payload)

    def _trainer_ping(self, link: TrainerLink, message: Ping) -> None:
        link.send(Ok(id=message.id))

    def _not_from_trainer(self, link: TrainerLink, message: ClientMessage) -> None:
        raise ProtocolError(f"{message.kind!r} is not a trainer message")
