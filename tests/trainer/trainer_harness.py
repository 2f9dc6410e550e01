"""A stand-in supervisor for trainer tests: a Unix-socket server that speaks the protocol.

It accepts one trainer, answers its Hello with a Welcome, records every message, and can
send ``TrainerCommand(stop)`` or hang up once a given step has been reported, or send any
messages of its own (``send_at``: step -> messages, sent when that step is reported).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.config.config_file import build_run_config
from engine.config.run_config import RunConfig
from engine.domain import TelemetrySample
from engine.run.directory import RunDir
from engine.wire.protocol import (
    Hello,
    StepReport,
    TrainerCommand,
    TrainerEvent,
    Welcome,
    check_hello,
    decode_client,
    encode,
)
from tests.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]


MADE_HOMES: list[Path] = []
"""Homes ``make_run`` created; tests/trainer/conftest.py removes them after each test."""


def make_run(raw: dict[str, Any] | None = None) -> RunDir:
    """A run directory under a short /tmp path (Unix socket paths must stay < 108 bytes)."""
    home = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))
    MADE_HOMES.append(home)
    return RunDir.create(build_run_config(raw or {}), home=home)


def rewrite_config(run: RunDir, config: RunConfig) -> None:
    run.write_config(config)


class SupervisorStub:
    def __init__(
        self,
        path: Path,
        stop_at_step: int | None = None,
        hang_up_at_step: int | None = None,
        send_at: dict[int, list[BaseModel]] | None = None,
    ) -> None:
        self.stop_at_step = stop_at_step
        self.send_at = dict(send_at or {})
        self.hang_up_at_step = hang_up_at_step
        self.hello: Hello | None = None
        self.messages: list[Any] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(os.fspath(path))
        self._server.listen(1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._server.accept()
        with conn, conn.makefile("rb") as reader:
            self.hello = check_hello(decode_client(reader.readline()))
            conn.sendall(encode(Welcome(run_id="test-run", state="starting", last_seq=0)))
            for line in reader:
                message = decode_client(line)
                self.messages.append(message)
                if isinstance(message, StepReport):
                    for extra in self.send_at.pop(message.sample.step, []):
                        conn.sendall(encode(extra))
                if isinstance(message, StepReport) and message.sample.step == self.stop_at_step:
                    conn.sendall(encode(TrainerCommand(command="stop", reason="test")))
                if isinstance(message, StepReport) and message.sample.step == self.hang_up_at_step:
                    return

    def close(self) -> None:
        self._server.close()

    @property
    def samples(self) -> list[TelemetrySample]:
        return [m.sample for m in self.messages if isinstance(m, StepReport)]

    def events(self, type: str | None = None) -> list[TrainerEvent]:
        return [m for m in self.messages if isinstance(m, TrainerEvent) and (type is None or m.type == type)]


def run_trainer(
    run: RunDir, attempt: int = 1, timeout_s: float = 120.0, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m engine.trainer RUN_DIR --attempt N`` to the end; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "engine.trainer", os.fspath(run.path), "--attempt", str(attempt), *extra],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def wait_while_alive(
    proc: subprocess.Popen[str],
    predicate: Callable[[], Any],
    *,
    what: str,
    timeout: float = 120.0,
    seen: Callable[[], Any] | None = None,
    every_s: float = 0.05,
) -> None:
    """Wait until ``predicate()`` holds while ``proc`` runs; fail at once if it exits first."""
    wait_for(
        lambda: predicate() or proc.poll() is not None, timeout=timeout, what=what, seen=seen, every_s=every_s
    )
    if not predicate():
        raise AssertionError(f"the process exited with {proc.returncode} before {what}")


def start_trainer(run: RunDir, attempt: int = 1) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine.trainer", os.fspath(run.path), "--attempt", str(attempt)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
