"""A planner that is a user's command, speaking JSON lines on stdin/stdout.

The command runs as one long-lived subprocess. Per planning tick the supervisor writes one
JSON object (the telemetry summary) and a newline to its stdin and takes the first line
that comes back within ``timeout_s`` as the reply: a directive object (see
engine.directives.planners.reply) or ``{}``. One reply per ask: any other line (a second
line after a reply, a line between asks) is discarded and counted, never taken as a later
ask's reply (``engine.directives.planners.reply_lines``). A line over ``MAX_LINE_BYTES`` or
a reply that is not one JSON object is an answer refused with a reason; no reply in time,
or a command that exited, is a failed ask. A command that does not answer in time is
presumed stuck and killed. A command that died or was killed is started again after a
backoff that doubles per consecutive failure (meanwhile it is not asked); after
``MAX_FAILURES`` in a row it is disabled and a ``planner_disabled`` event says so. Its
stderr is discarded. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.directives.planners.reply import (
    MAX_REPLY_BYTES,
    NOT_ASKED,
    PlannerReply,
    parse_reply,
    refused,
    unanswered,
)
from engine.directives.planners.reply_lines import OversizedLine, ReplyLines
from engine.events import PlannerDisabled, PlannerRestarted, Recorder

MAX_LINE_BYTES = MAX_REPLY_BYTES  # one reply line, newline included
BACKOFF_S = 1.0  # first wait before a restart; doubles per consecutive failure
MAX_BACKOFF_S = 60.0
MAX_FAILURES = 5  # consecutive failures (death, timeout) before the command is disabled
KILL_WAIT_S = 2.0  # after SIGKILL, how long we wait to reap it


class CommandPlanner:
    """``argv`` as a JSON-lines planner; ``ask`` never raises."""

    def __init__(
        self,
        argv: list[str],
        timeout_s: float,
        record: Recorder,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self.record = record
        self.clock = clock
        self.source = f"command:{Path(argv[0]).name}"[:128]
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: ReplyLines | None = None  # the running command's stdout, one reply per ask
        self._stray_before = 0  # lines discarded outside an ask by the commands killed so far
        self.failures = 0
        self.not_before = 0.0  # monotonic s: no restart before this
        self.disabled = False
        self.starts = 0

    async def ask(self, summary: dict[str, Any]) -> PlannerReply:
        """One tick: the summary out, one reply line in."""
        if self.disabled:
            return NOT_ASKED  # said once, in the planner_disabled event
        if self.proc is None or self.proc.returncode is not None:
            if self.clock() < self.not_before:
                return NOT_ASKED  # backing off: nothing this tick
            problem = await self._start()
            if problem is not None:
                return self._failed(problem)
        try:
            line = await asyncio.wait_for(self._exchange(summary), self.timeout_s)
        except TimeoutError:
            await self._kill()  # presumed stuck
            return self._failed(f"no reply within {self.timeout_s:g} s")
        except OversizedLine:
            return refused(f"reply line over the {MAX_LINE_BYTES}-byte cap")
        except (EOFError, ConnectionError, BrokenPipeError) as err:
            await self._kill()
            return self._failed(f"command exited ({type(err).__name__})")
        self.failures = 0
        return parse_reply(line)

    @property
    def stray_lines(self) -> int:
        """Lines discarded outside an ask so far (never any ask's reply), the running command's included."""
        return self._stray_before + (self.lines.stray if self.lines is not None else 0)

    async def close(self) -> None:
        await self._kill()

    # ----------------------------------------------------------------- process

    async def _start(self) -> str | None:
        await self._kill()  # the exited one's reader, if any
        self.starts += 1
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=MAX_LINE_BYTES,
            )
        except OSError as err:
            return f"could not start {self.argv[0]!r}: {err}"
        assert self.proc.stdout is not None
        self.lines = ReplyLines(self.proc.stdout, self.source)
        if self.starts > 1:
            self.record(
                PlannerRestarted(source=self.source, failures=self.failures, pid=self.proc.pid),
                f"planner {self.source} restarted after {self.failures} failure(s)",
            )
        return None

    async def _exchange(self, summary: dict[str, Any]) -> bytes:
        assert self.proc is not None and self.proc.stdin is not None and self.lines is not None
        stdin = self.proc.stdin

        async def send() -> None:
            stdin.write(json.dumps(summary, allow_nan=False).encode() + b"\n")
            await stdin.drain()

        return await self.lines.reply_to(send)

    async def _kill(self) -> None:
        proc, self.proc = self.proc, None
        lines, self.lines = self.lines, None
        if lines is not None:
            await lines.close()
            self._stray_before += lines.stray
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), KILL_WAIT_S)

    def _failed(self, problem: str) -> PlannerReply:
        """Count a failure, schedule the restart or disable, and refuse this tick's reply."""
        self.failures += 1
        if self.failures >= MAX_FAILURES:
            self.disabled = True
            self.record(
                PlannerDisabled(source=self.source, failures=self.failures, reason=problem),
                f"planner {self.source} disabled after {self.failures} failures: {problem}",
            )
        else:
            self.not_before = self.clock() + min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (self.failures - 1))
        return unanswered(problem)
