"""A new supervisor takes in what the trainer said after the last one died.

Before it serves anyone, the supervisor waits for a trainer that outlived its predecessor
(it finishes its step, saves and exits by itself; past ``ORPHAN_WAIT_S`` it is killed, and
its last verified checkpoint stands), then reads every spool
(``engine.run.report_spool``) in attempt order and stores what the store lacks: a step of
that attempt not stored yet, an event of that attempt not stored with the same type,
message and data. Lines that do not decode, the supervisor's own event types and data
that does not fit its payload are refused as on the socket, and logged. A directive's
``directive_applied`` echo is the directive queue's to record (with its view): one already
recorded for that decision, or a re-send of the values in effect, is not stored again.
Each spool is removed once its lines are committed. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from engine.events import PAYLOADS, SUPERVISOR_EVENTS, DirectiveApplied, ReportsRecovered
from engine.run.directory import RunDir, pid_alive
from engine.run.report_spool import spool_lines, spools
from engine.run.storage.store import Store
from engine.supervisor.journal import Journal
from engine.wire.protocol import ProtocolError, StepReport, TrainerEvent, decode_client

log = logging.getLogger(__name__)

ORPHAN_WAIT_S = 20.0  # s a trainer that outlived its supervisor gets to save and exit
ORPHAN_POLL_S = 0.1


@dataclass
class Intake:
    """What the spools held that the store lacked."""

    steps: int = 0
    events: int = 0
    refused: int = 0
    attempts: list[int] = field(default_factory=list)
    """Attempts whose spool was read."""

    def reached(self, attempt: int) -> bool:
        """The spool of ``attempt`` was read: that trainer outlived its supervisor."""
        return attempt in self.attempts

    def record(self, journal: Journal) -> None:
        """``reports_recovered``, if any spool was read."""
        if not self.attempts:
            return
        recovered = ReportsRecovered(
            steps=self.steps, events=self.events, refused=self.refused, attempts=self.attempts
        )
        journal.record(
            recovered,
            f"taken in from the spool of attempt(s) {', '.join(map(str, self.attempts))}: "
            f"{self.steps} steps, {self.events} events the store lacked",
        )


def is_trainer_of(pid: int | None, run: RunDir) -> bool:
    """``pid`` is alive and is a trainer of this run (its command line names the run dir):
    a recycled pid is never waited for, let alone killed."""
    if pid is None or not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.fsencode(run.path) in cmdline


async def outlast_orphan(run: RunDir, pid: int | None) -> bool:
    """Wait for the previous supervisor's trainer ``pid`` to exit (SIGKILL to its group
    after ORPHAN_WAIT_S); True if it was still running."""
    if not is_trainer_of(pid, run):
        return False
    assert pid is not None
    log.info("trainer pid %d outlived its supervisor: waiting for its final save and exit", pid)
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while is_trainer_of(pid, run) and time.monotonic() < deadline:
        await asyncio.sleep(ORPHAN_POLL_S)
    if is_trainer_of(pid, run):
        log.warning("trainer pid %d still running after %g s: killing it", pid, ORPHAN_WAIT_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    return True


def take_in(run: RunDir, store: Store) -> Intake:
    """Store what every spool holds and the store lacks, attempt by attempt; remove them."""
    intake = Intake()
    for attempt, path in spools(run):
        _take_in_one(store, attempt, spool_lines(path), intake)
        store.flush()  # committed before the spool goes
        with contextlib.suppress(OSError):
            path.unlink()
        intake.attempts.append(attempt)
    return intake


def _take_in_one(store: Store, attempt: int, lines: list[bytes], intake: Intake) -> None:
    steps = {int(s) for (s,) in store.query("SELECT step FROM steps WHERE attempt = ?", (attempt,))}
    events = set(store.query("SELECT type, message, data FROM events WHERE attempt = ?", (attempt,)))
    applied = _decisions_applied(store)
    for line in lines:
        try:
            message = decode_client(line)
            if isinstance(message, TrainerEvent):
                _check_event(message)
        except ProtocolError as err:
            log.warning("spool of attempt %d: a line refused: %s", attempt, err.reason)
            intake.refused += 1
            continue
        if isinstance(message, StepReport) and message.sample.attempt == attempt:
            if message.sample.step not in steps:
                store.add_step(message.sample)
                steps.add(message.sample.step)
                intake.steps += 1
        elif isinstance(message, TrainerEvent):
            key = (message.type, message.message, json.dumps(message.data, default=str))
            if message.type == DirectiveApplied.event_type:
                echo = DirectiveApplied.model_validate(message.data)
                if (
                    echo.resend
                    or echo.directive_id is None
                    or (echo.directive_id, echo.decision_id) in applied
                ):
                    continue
                applied.add((echo.directive_id, echo.decision_id))
            if key not in events:
                store.append_event(
                    message.type,
                    severity=message.severity,
                    message=message.message,
                    data=message.data,
                    attempt=attempt,
                )
                events.add(key)
                intake.events += 1


def _decisions_applied(store: Store) -> set[tuple[str, str]]:
    """(directive id, decision id) of every ``directive_applied`` recorded."""
    rows = store.query("SELECT data FROM events WHERE type = ?", (DirectiveApplied.event_type,))
    out: set[tuple[str, str]] = set()
    for (data,) in rows:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            doc = json.loads(data)
            out.add((str(doc.get("directive_id")), str(doc.get("decision_id", ""))))
    return out


def _check_event(message: TrainerEvent) -> None:
    """What the socket refuses of a trainer's event, refused here too."""
    if message.type in SUPERVISOR_EVENTS:
        raise ProtocolError(f"event type {message.type!r} is the supervisor's to record")
    model = PAYLOADS.get(message.type)
    if model is not None:
        try:
            model.model_validate(message.data)
        except ValidationError as err:
            raise ProtocolError(
                f"{message.type}: data does not fit its payload ({err.error_count()} errors)"
            ) from None
