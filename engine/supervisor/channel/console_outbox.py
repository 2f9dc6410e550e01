"""One console connection's outbox in the supervisor.

A bounded queue of events and replies plus a one-slot telemetry mailbox sent at most
``TELEMETRY_HZ``, drained by the console's own task at the socket's pace. The supervisor
only ever appends; a console too slow to keep up is told so and dropped, never waited for.
Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque

from pydantic import BaseModel

from engine.domain import Event, RunState, TelemetrySample
from engine.events import StateChanged
from engine.hardware_report import HardwareSnapshot
from engine.wire.protocol import TELEMETRY_HZ, Error, EventMessage, Hardware, Hello, Telemetry, encode

log = logging.getLogger(__name__)

CLIENT_QUEUE_MAX = 1024  # lines (events, replies) waiting for one console before it is dropped


class ConsoleClient:
    """One console connection's outbox, drained by its own task at the socket's pace."""

    def __init__(self, writer: asyncio.StreamWriter, hello: Hello, *, queue_max: int | None = None) -> None:
        self.writer = writer
        self.hello = hello
        self.queue_max = CLIENT_QUEUE_MAX if queue_max is None else queue_max
        self.sent_seq = 0
        """Highest event seq queued for this client: live events at or below it are duplicates."""
        self.closed = False
        self._queue: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._held: list[Event] | None = None  # live events that arrived during a replay
        self._telemetry: tuple[TelemetrySample, RunState] | None = None
        self._hardware: HardwareSnapshot | None = None  # newest reading not yet sent
        self._coalesced = 0  # samples replaced in the slot since the last one went out
        self._next_telemetry = 0.0  # loop time when the next telemetry may go out
        self._closer: asyncio.Task[None] | None = None
        self._pump_task = asyncio.create_task(self._pump(), name="console-outbox")

    # -------------------------------------------------------------- supervisor side

    def send(self, message: BaseModel) -> None:
        """Queue a reply or event; a console this far behind is dropped."""
        if self.closed:
            return
        self._queue.append(encode(message))
        if len(self._queue) > self.queue_max:
            self._overflow()
            return
        if len(self._queue) >= self.queue_max // 2:
            self._room.clear()
        self._wake.set()

    def push_event(self, event: Event) -> None:
        """A live event: held during a replay, skipped if already sent."""
        changed = StateChanged.of(event)
        if changed is not None and self._telemetry is not None:
            # the sample waiting in the slot was offered in the old state; sent after this
            # event it would take the console back there (a pause shown as "running")
            self._telemetry = (self._telemetry[0], changed.to)
        if self._held is not None:
            self._held.append(event)
            if len(self._held) > self.queue_max:
                self._overflow()
            return
        if event.seq > self.sent_seq:
            self.sent_seq = event.seq
            self.send(EventMessage(event=event))

    def offer_telemetry(self, sample: TelemetrySample, state: RunState) -> None:
        """Newest sample wins; the ones it replaces are counted in ``coalesced``."""
        if self.closed or not self.hello.telemetry:
            return
        if self._telemetry is not None:
            self._coalesced += 1
            replaced = self._telemetry[0]
            if sample.ranks is None and replaced.ranks is not None:
                # a rank report comes every few steps only: it rides on the newer sample
                sample = sample.model_copy(update={"ranks": replaced.ranks})
        self._telemetry = (sample, state)
        self._wake.set()

    def offer_hardware(self, snapshot: HardwareSnapshot) -> None:
        """Newest hardware reading wins; sent as soon as the outbox is empty."""
        if self.closed or not self.hello.telemetry:
            return
        self._hardware = snapshot
        self._wake.set()

    def hold_live(self) -> None:
        self._held = []

    def release_live(self, replayed_to: int) -> None:
        """End a replay that reached seq ``replayed_to``: send held events not yet sent."""
        held, self._held = self._held or [], None
        self.sent_seq = max(self.sent_seq, replayed_to)
        for event in held:
            self.push_event(event)

    async def wait_room(self) -> None:
        """Until the queue is at most half full (replays pace themselves with this)."""
        await self._room.wait()

    async def drain(self, timeout: float) -> None:
        """Until everything queued has been written, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self._queue and not self.closed and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self.closed = True
        self._room.set()
        if self._pump_task is not asyncio.current_task():
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump_task
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)
        except (asyncio.TimeoutError, OSError):
            self.writer.transport.abort()  # a console that reads nothing cannot hold us

    # ------------------------------------------------------------------ socket side

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self.closed:
                self._wake.clear()
                if self._queue:
                    await self._write(self._queue.popleft())
                    if len(self._queue) < self.queue_max // 2:
                        self._room.set()
                    continue
                if self._hardware is not None:
                    snapshot, self._hardware = self._hardware, None
                    await self._write(encode(Hardware(snapshot=snapshot)))
                    continue
                wait: float | None = None
                if self._telemetry is not None:
                    wait = self._next_telemetry - loop.time()
                    if wait <= 0:
                        await self._send_telemetry(loop.time())
                        continue
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
        except (ConnectionError, OSError):
            self.closed = True  # the console went away; the reader side notices EOF
            self._room.set()

    async def _send_telemetry(self, now: float) -> None:
        assert self._telemetry is not None
        (sample, state), coalesced = self._telemetry, self._coalesced
        self._telemetry, self._coalesced = None, 0
        self._next_telemetry = now + 1.0 / TELEMETRY_HZ
        await self._write(encode(Telemetry(sample=sample, state=state, coalesced=coalesced)))

    async def _write(self, line: bytes) -> None:
        self.writer.write(line)
        await self.writer.drain()

    def _overflow(self) -> None:
        self._queue.clear()
        self._held = None
        reason = (
            f"too slow: more than {self.queue_max} messages behind; "
            f"reconnect with replay_from={self.sent_seq}"
        )
        log.warning("dropping a console: %s", reason)
        with contextlib.suppress(Exception):
            self.writer.write(encode(Error(reason=reason)))
        self.closed = True
        self._room.set()
        self._closer = asyncio.ensure_future(self.close())
