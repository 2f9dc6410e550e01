"""Fixtures for the engine tests: short run dirs, an in-process supervisor with the fake
trainer, and a small protocol client. Everything is bounded by timeouts so a hang fails;
the timeouts are generous (a shared CI machine), as each wait ends when its message comes.
Polling a condition (the store, a file) is ``tests.waiting``."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.supervisor.daemon import Supervisor
from engine.wire import protocol
from tests.waiting import until

FAKE_TRAINER = Path(__file__).resolve().parents[1] / "fakes" / "fake_trainer.py"
FAKE_TRAINER_CMD = [sys.executable, str(FAKE_TRAINER)]


@pytest.fixture
def directory() -> Iterator[Path]:
    """A run's ``checkpoints/`` (not created yet) in a scratch directory."""
    path = Path(tempfile.mkdtemp(prefix="mtck", dir="/tmp"))
    yield path / "checkpoints"
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home() -> Iterator[Path]:
    # Short: a Unix socket path must fit in 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run(home: Path) -> RunDir:
    return RunDir.create(build_run_config(steps=100), home=home)


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set FAKE_TRAINER_* variables (inherited by the trainer the supervisor launches)."""

    def set_env(**values: Any) -> None:
        for key, value in values.items():
            monkeypatch.setenv(f"FAKE_TRAINER_{key.upper()}", str(value))

    set_env(rate_hz=100, steps=100000)
    return set_env


@pytest.fixture
def wait_until() -> Callable[..., Awaitable[Any]]:
    """``await wait_until(predicate, "what", timeout=10.0)``: the positive condition a test
    waits for instead of a fixed sleep (``tests.waiting.until``)."""

    async def waiting(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        return await until(predicate, timeout=timeout, what=what)

    return waiting


class Client:
    """A console (or trainer) connection speaking the real protocol, with timeouts."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, run: RunDir, *, hello: bool = True, **fields: Any) -> Client:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(run.socket), limit=protocol.STREAM_LIMIT), 30
        )
        client = cls(reader, writer)
        if hello:
            fields.setdefault("protocol", protocol.PROTOCOL_VERSION)
            await client.send(protocol.Hello(**fields))
        return client

    async def send(self, message: BaseModel | bytes) -> None:
        self.writer.write(message if isinstance(message, bytes) else protocol.encode(message))
        await self.writer.drain()

    async def recv(self, timeout: float = 30.0) -> Any:
        """Next server message; None at EOF."""
        line = await asyncio.wait_for(protocol.read_line(self.reader), timeout)
        return None if line is None else protocol.decode_server(line)

    async def until(
        self, predicate: Callable[[Any], bool], timeout: float = 30.0, what: str = "a matching message"
    ) -> tuple[Any, list[Any]]:
        """Read until a message matches; returns it and everything read before it. After
        ``timeout`` s, an AssertionError naming ``what`` and the kinds of the last messages read."""
        seen: list[Any] = []

        async def scan() -> Any:
            while True:
                message = await self.recv(timeout)
                if message is None:
                    raise EOFError(f"connection closed; seen {[m.kind for m in seen]}")
                if predicate(message):
                    return message
                seen.append(message)

        try:
            return await asyncio.wait_for(scan(), timeout), seen
        except asyncio.TimeoutError:
            kinds = [m.kind for m in seen[-20:]]
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what}; last read: {kinds}"
            ) from None

    async def answer(self, request: BaseModel, timeout: float = 30.0) -> tuple[Any, list[Any]]:
        """Send a request and read up to the Ok/Error that answers it."""
        await self.send(request)
        request_id = request.id  # type: ignore[attr-defined]
        return await self.until(
            lambda m: m.kind in ("ok", "error") and m.id == request_id, timeout, f"the answer to {request_id}"
        )

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


@pytest.fixture
async def connect(run: RunDir) -> AsyncIterator[Callable[..., Any]]:
    """``await connect(**hello_fields)`` -> a Client of the run's socket, closed at teardown."""
    clients: list[Client] = []

    async def connector(*, hello: bool = True, **fields: Any) -> Client:
        client = await Client.connect(run, hello=hello, **fields)
        clients.append(client)
        return client

    yield connector
    for client in clients:
        await client.close()


class Running:
    """An in-process Supervisor serving in a task."""

    def __init__(self, supervisor: Supervisor, task: asyncio.Task[int]) -> None:
        self.supervisor = supervisor
        self.task = task

    async def result(self, timeout: float = 30.0) -> int:
        return await asyncio.wait_for(asyncio.shield(self.task), timeout)


@pytest.fixture
async def start(run: RunDir) -> AsyncIterator[Callable[..., Any]]:
    """``await start(trainer_cmd=..., **kwargs)`` -> Running, once the socket serves."""
    started: list[Running] = []

    async def starter(trainer_cmd: list[str] | None = None, **kwargs: Any) -> Running:
        supervisor = Supervisor(run, FAKE_TRAINER_CMD if trainer_cmd is None else trainer_cmd, **kwargs)
        task = asyncio.create_task(supervisor.serve())
        running = Running(supervisor, task)
        started.append(running)
        waiter = asyncio.create_task(supervisor.serving.wait())
        await asyncio.wait({waiter, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # raises what went wrong
        assert supervisor.serving.is_set(), "supervisor did not start serving"
        return running

    yield starter
    for running in started:
        if not running.task.done():
            running.task.cancel()  # its cleanup kills the trainer
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(running.task, 10)
