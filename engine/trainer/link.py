"""The trainer's line to the supervisor: a blocking Unix-socket client speaking NDJSON.

The supervisor is the run. The trainer says Hello, reads the Welcome, then sends a
StepReport per logged step and a TrainerEvent per happening. A daemon thread reads what the
supervisor says; a ``TrainerCommand(stop)`` or the socket closing (the supervisor is gone)
sets ``stop_requested``, and the loop checkpoints and exits at the next step boundary.
From then on what it sends goes to the attempt's spool (``engine.run.report_spool``),
after the last lines it had sent, which the dead supervisor may not have stored: the next
supervisor stores them, so a supervisor's death leaves no hole in the record.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from engine.domain import Severity
from engine.events import Payload
from engine.run.report_spool import RECENT_LINES, SpoolWriter
from engine.wire.protocol import (
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    ApplyDirective,
    CoreShare,
    Hello,
    InjectChaos,
    ProtocolError,
    TrainerCommand,
    TrainerEvent,
    Welcome,
    decode_server,
    encode,
)

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0  # the supervisor creates its socket before it starts us; be patient
SEND_TIMEOUT_S = 5.0  # a send stuck this long means the supervisor is wedged: give up on it


class LinkError(ConnectionError):
    """The supervisor could not be reached or refused us."""


class Link(Protocol):
    """What the training loop needs from its connection."""

    stop_requested: threading.Event
    pause_requested: threading.Event
    """Set while the operator holds training (the loop waits at a step boundary)."""
    cores_for_others: int
    """Cores the supervisor asked training to leave to other work (``CoreShare``); 0: none."""

    def send(self, message: BaseModel) -> None: ...

    def event(self, payload: Payload, message: str = "", severity: Severity | None = None) -> None: ...

    def close(self) -> None: ...


class _EventSender(ABC):
    """``event`` in terms of ``send``, which each link defines."""

    @abstractmethod
    def send(self, message: BaseModel) -> None: ...

    def event(self, payload: Payload, message: str = "", severity: Severity | None = None) -> None:
        """Send a TrainerEvent of the payload's type (``severity``: the type's usual one if None)."""
        self.send(
            TrainerEvent(
                type=payload.event_type,
                message=message,
                severity=severity or payload.severity,
                data=payload.data(),
            )
        )


class NullLink(_EventSender):
    """No supervisor (bench, standalone runs): messages are dropped, or kept if ``record``."""

    def __init__(self, record: bool = False) -> None:
        self.stop_requested = threading.Event()
        self.pause_requested = threading.Event()
        self.cores_for_others = 0
        self.directives: deque[ApplyDirective] = deque()
        """Directives to apply at the next step boundary; none arrive here."""
        self.chaos: deque[InjectChaos] = deque()
        """Chaos to apply at the next step boundary; only a test puts any here."""
        self.sent: list[BaseModel] | None = [] if record else None

    def send(self, message: BaseModel) -> None:
        if self.sent is not None:
            self.sent.append(message)

    def close(self) -> None:
        pass


class SocketLink(_EventSender):
    """Connected to a supervisor over ``sock``; use ``SocketLink.connect`` to dial one."""

    def __init__(
        self, sock: socket.socket, welcome: Welcome | None = None, spool: SpoolWriter | None = None
    ) -> None:
        self.stop_requested = threading.Event()
        self.pause_requested = threading.Event()
        self.cores_for_others = 0
        self.stop_reason = ""
        self.directives: deque[ApplyDirective] = deque()
        """Admitted directives from the supervisor, applied by the loop at the next step
        boundary (deque: appended by the reader thread, popped by the loop, thread-safe)."""
        self.chaos: deque[InjectChaos] = deque()
        """Chaos requests, applied by the loop at the next step boundary (as directives)."""
        self.welcome = welcome
        self._sock = sock
        self._sock.settimeout(SEND_TIMEOUT_S)  # bounds sendall; the reader thread blocks in recv
        self._send_lock = threading.Lock()
        self._broken = False
        self._closing = False
        self._spool = spool  # where lines go once the supervisor is gone (None: dropped)
        self._recent: deque[bytes] = deque(maxlen=RECENT_LINES)  # sent, maybe never stored
        self._spooled = False  # the recent lines are in the spool already
        self._reader = threading.Thread(target=self._read_forever, name="memtui-link-reader", daemon=True)
        self._reader.start()

    @classmethod
    def connect(
        cls,
        path: Path,
        client: str = "",
        timeout_s: float = CONNECT_TIMEOUT_S,
        spool: SpoolWriter | None = None,
    ) -> SocketLink:
        """Dial the supervisor at ``path`` (retrying until ``timeout_s``), Hello, read Welcome;
        ``spool``: where to report once the supervisor is gone."""
        sock = _dial(path, timeout_s)
        try:
            sock.settimeout(timeout_s)
            sock.sendall(
                encode(Hello(protocol=PROTOCOL_VERSION, role="trainer", client=client, replay_from=None))
            )
            welcome = _read_welcome(sock)
        except Exception:
            sock.close()
            raise
        return cls(sock, welcome, spool)

    def send(self, message: BaseModel) -> None:
        """Write one NDJSON line; after the supervisor is gone, to the spool (if any)."""
        data = encode(message)
        with self._send_lock:
            self._recent.append(data)
            if not self._broken:
                try:
                    self._sock.sendall(data)
                    return
                except OSError as err:  # includes socket.timeout
                    self._lost(f"send failed: {err}")
            self._to_spool([data])

    def close(self) -> None:
        self._closing = True  # what the reader sees next is our own doing, not a lost supervisor
        with self._send_lock:
            if self._broken:
                self._to_spool([])  # the recent lines, if nothing was sent since the loss
            if self._spool is not None:
                self._spool.close()
        with contextlib.suppress(OSError):  # already shut down by the peer
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def _to_spool(self, lines: list[bytes]) -> None:
        """Append ``lines`` to the spool, after the recent ones the first time (under the lock)."""
        if self._spool is None:
            return
        if not self._spooled:
            self._spooled = True
            lines = list(self._recent)  # ends with ``lines``: appended before sending
        try:
            self._spool.write(lines)
        except OSError as err:  # a full disk: the lines are lost, training goes on
            log.warning("could not spool %d report line(s) to %s: %s", len(lines), self._spool.path, err)

    # ------------------------------------------------------------------ reading

    def _read_forever(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue  # quiet supervisor: keep listening
            except OSError as err:
                self._lost(f"read failed: {err}")
                return
            if not chunk:
                self._lost("supervisor closed the connection")
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self._handle(line)
            if len(buffer) > MAX_LINE_BYTES:
                buffer = b""  # a runaway line: drop it, the next newline resynchronises

    def _handle(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = decode_server(line)
        except ProtocolError as err:
            log.warning("ignoring a bad line from the supervisor: %s", err.reason)
            return
        if isinstance(message, ApplyDirective):
            self.directives.append(message)
        elif isinstance(message, InjectChaos):
            self.chaos.append(message)
        elif isinstance(message, TrainerCommand):
            self._command(message)
        elif isinstance(message, CoreShare):
            self.cores_for_others = message.cores  # read at the next step boundary

    def _command(self, message: TrainerCommand) -> None:
        if message.command == "stop":
            self.stop_reason = message.reason or "stop requested"
            self.stop_requested.set()
        elif message.command == "pause":
            self.pause_requested.set()
        else:  # resume
            self.pause_requested.clear()

    def _lost(self, why: str) -> None:
        if not self._broken and not self._closing:
            log.warning("supervisor link lost (%s): stopping after this step", why)
        self._broken = True
        self.stop_reason = self.stop_reason or "supervisor gone"
        self.stop_requested.set()


def _dial(path: Path, timeout_s: float) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError) as err:
            sock.close()
            if time.monotonic() >= deadline:
                raise LinkError(f"no supervisor at {path} after {timeout_s:.0f} s: {err}") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _read_welcome(sock: socket.socket) -> Welcome:
    """Read up to the first newline (byte by byte: nothing after it may be swallowed)."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            raise LinkError("supervisor closed the connection before its welcome")
        line += byte
        if len(line) > MAX_LINE_BYTES:
            raise LinkError("supervisor's welcome line is too long")
    try:
        message = decode_server(bytes(line))
    except ProtocolError as err:
        raise LinkError(f"supervisor's first line is not a welcome: {err.reason}") from None
    if not isinstance(message, Welcome):
        reason = getattr(message, "reason", message.kind)
        raise LinkError(f"supervisor refused the trainer: {reason}")
    if message.protocol != PROTOCOL_VERSION:
        raise LinkError(f"protocol mismatch: supervisor {message.protocol}, trainer {PROTOCOL_VERSION}")
    return message
