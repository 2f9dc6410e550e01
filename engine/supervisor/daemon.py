"""The supervisor: the asyncio daemon that is the run (``python -m engine supervise RUN_DIR``).

It owns the run directory: it opens the store, serves ``engine.sock`` to consoles and to
the trainer, launches the trainer as a child process, records everything that happens as
numbered events (stored first, then fanned out) and ends the run with a state and a
reason. Torch-free, so it starts in a blink and survives whatever the trainer does.

Per console, an outbox (``engine.supervisor.console_outbox.ConsoleClient``) decouples the supervisor
from the socket; the trainer's command line, its endings and its process tree are
``engine.supervisor.trainer_process``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.alerts.health import HealthBoard
from engine.alerts.watch import AlertWatch
from engine.checkpoints.store import newest_verified_step
from engine.config import AlertConfig, RestartConfig
from engine.directives.pacer import DirectivePacer
from engine.directives.planners.external import ExternalPlanner, build_external_planner
from engine.directives.queue import DirectiveQueue, answer_request
from engine.domain import TERMINAL_STATES, Event, RunState, RunStatus, Severity, TelemetrySample
from engine.hardware_report import HardwareSnapshot
from engine.protocol import (
    MAX_LINE_BYTES,
    STREAM_LIMIT,
    Approve,
    Chaos,
    Clamp,
    ClientMessage,
    Error,
    EventMessage,
    Hello,
    LineTooLong,
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
    TrainerCommand,
    TrainerEvent,
    Welcome,
    check_hello,
    decode_client,
    encode,
    read_line,
)
from engine.run.directory import RunDir
from engine.run.status import compose_status, rank_report
from engine.run.store import Store
from engine.supervisor import peer
from engine.supervisor.console_outbox import ConsoleClient
from engine.supervisor.rank_processes import rank_processes
from engine.supervisor.restart_policy import AttemptEnd, RestartDecision, decide
from engine.supervisor.trainer_process import (
    TrainerExit,
    configured_ranks,
    default_trainer_command,
    describe_exit,
    ending,
    geometry_note,
    kill_group,
    signal_name,
)

log = logging.getLogger("engine.supervisor.daemon")

STOP_GRACE_S = 60.0  # s from a stop request to SIGKILL of a trainer that did not exit
FLUSH_INTERVAL_S = 0.5  # s between batched step writes (the store also flushes at 256 rows)
HELLO_TIMEOUT_S = 10.0  # s a new connection has to say hello
TRAINER_DRAIN_S = 2.0  # s to read a dead trainer's last lines before judging its exit
CLIENT_DRAIN_S = 2.0  # s consoles get at the end to receive the final events
REPLAY_PAGE = 256  # events read from the store per replay page
TRAINER_WRITE_BUFFER_MAX = MAX_LINE_BYTES  # bytes unread by the trainer before we stop answering

# Event types only the supervisor may write; a trainer claiming one is refused.
SUPERVISOR_EVENTS = frozenset(
    {"run_started", "run_ended", "state_changed", "trainer_launched", "trainer_exited", "stop_requested"}
    | {"chaos"}
    | {"trainer_restarted", "restarts_exhausted"}
    | {"alert", "doctor_report"}  # issue 7
    | {"directive_proposed", "directive_decided", "directives_rate_limited"}  # issue 6
    | {"planner_restarted", "planner_disabled"}  # issue 6: external planners
)
DIRECTIVES_UNAVAILABLE = "directives are not available until the Directives issue lands"


# ------------------------------------------------------------------ reading a peer


async def decoded_lines(
    reader: asyncio.StreamReader, reply: Callable[[BaseModel], None]
) -> AsyncIterator[ClientMessage]:
    """Valid messages from ``reader`` until EOF; each bad line is answered with an Error.

    An over-long line, malformed JSON, an unknown kind or wrong types cost the peer one
    ``Error`` naming the reason; the connection goes on.
    """
    while True:
        try:
            line = await read_line(reader)
        except LineTooLong as err:
            reply(Error(reason=err.reason))
            continue
        except (ConnectionError, OSError):
            return
        if line is None:
            return
        if not line.strip():
            continue
        try:
            message = decode_client(line)
        except ProtocolError as err:
            reply(Error(id=err.request_id, reason=err.reason))
            continue
        yield message


# ----------------------------------------------------------------- trainer link


class TrainerLink:
    """The trainer's connection: commands go out, its lines come in."""

    def __init__(self, writer: asyncio.StreamWriter, pid: int | None) -> None:
        self.writer = writer
        self.pid = pid
        self.closed = asyncio.Event()

    def send(self, message: BaseModel) -> None:
        if self.writer.is_closing():
            return
        if self.writer.transport.get_write_buffer_size() > TRAINER_WRITE_BUFFER_MAX:
            return  # a trainer that reads nothing gets no more answers, rather than our memory
        self.writer.write(encode(message))


# -------------------------------------------------------------------- supervisor


class SupervisorError(RuntimeError):
    """The supervisor cannot serve this run (e.g. another supervisor already does)."""


class Supervisor:
    """One run's daemon. ``await serve()`` runs the run to its end and returns 0."""

    def __init__(
        self,
        run: RunDir,
        trainer_cmd: list[str] | None = None,
        *,
        stop_grace_s: float = STOP_GRACE_S,
        owner_uid: int | None = None,
        fresh_start: bool = False,
    ) -> None:
        self.run = run
        self._fresh_pending = fresh_start
        """Pass ``--fresh`` to the next trainer: start over if no checkpoint verifies."""
        self._restart_streak = 0  # restarts in a row without a new checkpoint
        self._error_restartable: bool | None = None  # the last trainer_error's "restartable"
        self._streak_checkpoint = -1  # newest verified checkpoint step when the streak began
        self._configured_ranks = configured_ranks(run)
        self._ranks_seen: tuple[int, dict[str, int]] = (0, {})  # (torchrun pid, its ranks)
        self.trainer_cmd = (
            list(trainer_cmd)
            if trainer_cmd is not None
            else default_trainer_command(ranks=self._configured_ranks)
        )
        """Command prefix; the run dir and ``--attempt N`` are appended."""
        self.stop_grace_s = stop_grace_s
        self.owner_uid = os.getuid() if owner_uid is None else owner_uid
        """Only peers of this uid may connect."""
        self.state: RunState = "starting"
        self.attempt = 0
        self.restarts = 0
        self.latest: TelemetrySample | None = None
        self.serving = asyncio.Event()
        """Set once the socket accepts connections (for in-process users)."""
        self._store: Store | None = None
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[ConsoleClient] = set()
        self._trainer: TrainerLink | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._stop_reason: str | None = None
        self._hold = False
        """The operator asked to pause training: kept across trainer restarts, and in the
        store's meta (``hold``) so that a run whose supervisor died while paused comes back
        paused after ``memtui resume``; cleared when the run ends."""
        self._finished_reason: str | None = None
        self._last_error: str | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.alerts: AlertWatch | None = None
        """Alert rules, hardware readings and doctor reports (issue 7); started by ``_listen``."""
        self.directives: DirectiveQueue | None = None
        """Planner and operator directives (issue 6); built from run.json by ``_open``."""
        self.planner: ExternalPlanner | None = None
        """A command or OpenAI-compatible planner (issue 6), asked from ``_on_step``."""
        self._directive_pacer = DirectivePacer()
        """Paces directive requests from all consoles (a flood costs the trainer no CPU)."""
        self.health = HealthBoard()
        """The newest doctor report and the alerts firing: the policy's ``problems``."""

    @property
    def store(self) -> Store:
        assert self._store is not None, "serve() opens the store"
        return self._store

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, handle_signals: bool = False) -> int:
        """Run to the end: open, listen, launch and watch the trainer, record the ending."""
        self._claim()
        try:
            self._open()
            await self._listen()
            if handle_signals:
                self._install_signal_handlers()
            self.serving.set()
            outcome = await self._supervise_trainer()
            await self._finish(*ending(outcome, self._stop_reason), outcome)
            return 0
        except Exception as err:
            log.exception("supervisor failed")
            self._record_crash(err)
            return 1
        finally:
            await self._close()

    def _claim(self) -> None:
        """Take the run dir: refuse if another live supervisor holds it, else write our pid."""
        self.run.ensure_layout()
        other = self.run.supervisor_pid()
        if other is not None and other != os.getpid():
            raise SupervisorError(f"{self.run.path} is already served by supervisor pid {other}")
        _write_atomically(self.run.pid_file, f"{os.getpid()}\n")

    def _open(self) -> None:
        self._store = Store(self.run.store)
        meta = self.store.read_meta()
        previous = meta.state
        self.attempt = meta.attempt
        self.restarts = meta.restarts
        self._hold = meta.hold
        self.store.update_meta(
            started_at=meta.started_at or time.time(),
            supervisor_pid=os.getpid(),
            exit_reason=None,
            attempt=self.attempt,
            restarts=self.restarts,
        )
        log.info("supervising %s (pid %d)", self.run.path, os.getpid())
        self._record(
            "run_started",
            message=f"supervisor pid {os.getpid()} serving {self.run.run_id}",
            data={"supervisor_pid": os.getpid(), "run_dir": str(self.run.path), "previous_state": previous},
        )
        self.state = "starting"
        self.store.update_meta(state="starting")
        if previous != "starting":  # previous is None for a fresh store
            self._record(
                "state_changed",
                message=f"{previous or '(new run)'} -> starting",
                data={"from": previous, "to": "starting"},
            )
        if self._hold:
            self._record(
                "pause_kept",
                message="the run was paused when its last supervisor ended: it stays paused "
                "(memtui unpause lets it go on)",
                data={"previous_state": previous},
            )
        self.directives = self._directive_queue()
        if self.directives is not None:
            policy = self.directives.config.policy
            self.planner = build_external_planner(policy, self.directives, self._record)
        self._judge_health()

    def _directive_queue(self) -> DirectiveQueue | None:
        try:
            config = self.run.read_config()
        except Exception:  # no readable run.json: directives are refused, the run goes on
            log.warning("no readable run config: directives disabled")
            return None
        # keep: every verdict to the store's decisions table, batched by its flush
        return DirectiveQueue(config, self._record, self._send_to_trainer, keep=self.store.add_decision)

    def _send_to_trainer(self, message: BaseModel) -> bool:
        """True if a trainer is connected to take ``message`` now."""
        if self._trainer is None:
            return False
        self._trainer.send(message)
        return True

    async def _listen(self) -> None:
        path = self.run.socket
        if path.exists() or path.is_symlink():
            path.unlink()  # stale: we hold the pid file, so no live supervisor owns it
        self._server = await asyncio.start_unix_server(self._on_connect, path=str(path), limit=STREAM_LIMIT)
        os.chmod(path, 0o600)  # the 0700 run dir already covers the moment before this
        self._spawn(self._flush_loop())
        self._start_alerts()

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop_signal, sig.name)
        # SIGHUP must never end a run; a handler (unlike SIG_IGN) is not inherited by the trainer.
        loop.add_signal_handler(signal.SIGHUP, log.info, "SIGHUP ignored")

    def _on_stop_signal(self, name: str) -> None:
        if self._stop_reason is None:
            log.info("%s: stopping the run", name)
            self.request_stop(f"{name} received")
        else:
            log.warning("%s again while stopping: killing the trainer now", name)
            self._kill_trainer()

    async def _finish(self, state: RunState, reason: str, outcome: TrainerExit) -> None:
        if outcome.returncode is not None:
            self._record(
                "trainer_exited",
                severity="info" if state != "failed" else "critical",
                message=f"{describe_exit(outcome.returncode)} (attempt {outcome.attempt})",
                data={
                    "attempt": outcome.attempt,
                    "returncode": outcome.returncode,
                    "signal": signal_name(outcome.returncode),
                    "reason": reason,
                },
                attempt=outcome.attempt,
            )
        self._end(state, reason)
        await asyncio.gather(*(c.drain(CLIENT_DRAIN_S) for c in list(self._clients)))

    def _end(self, state: RunState, reason: str) -> None:
        self.store.update_meta(exit_reason=reason, ended_at=time.time(), trainer_pid=None, hold=False)
        self._set_state(state)
        self._record(
            "run_ended",
            severity="critical" if state == "failed" else "info",
            message=f"run ended {state}: {reason}",
            data={"state": state, "reason": reason},
        )
        self.store.flush()
        log.info("run %s: %s", state, reason)

    def _record_crash(self, err: BaseException) -> None:
        if self._store is None or self.state in TERMINAL_STATES:
            return
        with contextlib.suppress(Exception):
            self._end("failed", f"supervisor error: {type(err).__name__}: {err}")

    async def _close(self) -> None:
        """Release everything; the run dir is left without socket and pid file."""
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        if self._proc is not None and self._proc.returncode is None:  # only on a crash or cancel
            self._kill_trainer()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._proc.wait(), 5.0)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(FileNotFoundError):
                self.run.socket.unlink()
        for client in list(self._clients):
            await client.close()
        if self._trainer is not None:
            self._trainer.writer.close()
        if self.planner is not None:
            with contextlib.suppress(Exception):
                await self.planner.close()  # kills a planner command
        if self.alerts is not None:
            await self.alerts.close()  # alert commands in flight finish (each within its timeout)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._store is not None:
            self._store.close()
        with contextlib.suppress(OSError, ValueError):
            if int(self.run.pid_file.read_text().strip()) == os.getpid():
                self.run.pid_file.unlink()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_alerts(self) -> None:
        """Alerts and hardware readings (engine.alerts.watch) on their own timer task."""
        try:
            config = self.run.read_config().alerts
        except Exception:  # a damaged run.json must not stop the run: the defaults apply
            config = AlertConfig()
        self.alerts = AlertWatch(
            config,
            self._record_watched,
            run_dir=self.run.path,
            checkpoint_dir=self.run.checkpoints,
            pids=self._engine_pids,
            expecting_steps=lambda: self.state == "running" and self._proc is not None,
            on_hardware=self._offer_hardware,
        )
        self.alerts.resolve_stale(self.store.events_since(0))  # a previous supervisor's, left firing
        self._spawn(self.alerts.run())

    def _offer_hardware(self, snapshot: HardwareSnapshot) -> None:
        """A new hardware reading to every console (newest wins per console; never blocks)."""
        for client in list(self._clients):
            client.offer_hardware(snapshot)

    def _record_watched(self, type: str, **fields: Any) -> Event:
        """``_record`` for AlertWatch: an alert or doctor report also re-judges the health."""
        event = self._record(type, **fields)
        if self.health.observe(event.type, event.data, event.message):
            self._judge_health()
        return event

    def _judge_health(self) -> None:
        """The policy's ``problems`` from the newest doctor report and the alerts firing."""
        if self.directives is not None:
            require = self.directives.config.policy.require_accelerator
            self.directives.problems = self.health.problems(require)

    def _engine_pids(self) -> dict[str, int]:
        pids = {"supervisor": os.getpid()}
        proc = self._proc
        if proc is not None and proc.returncode is None:
            pids["trainer"] = proc.pid  # torchrun itself when there are several ranks
            pids.update(self._rank_pids(proc.pid))
        return pids

    def _rank_pids(self, launcher: int) -> dict[str, int]:
        """torchrun's rank processes, found once per attempt (none for a single rank)."""
        if self._configured_ranks == 1:
            return {}
        if self._ranks_seen[0] != launcher or len(self._ranks_seen[1]) < self._configured_ranks:
            self._ranks_seen = (launcher, rank_processes(launcher))
        return self._ranks_seen[1]

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            self.store.flush()

    # -------------------------------------------------------------------- trainer

    async def _supervise_trainer(self) -> TrainerExit:
        """Run trainer attempts until one ends the run."""
        while True:
            outcome = await self._run_attempt()
            decision, resume_step = await self._restart_decision(outcome)
            if decision.action == "end":
                if decision.streak > 1:  # restarts were tried and ran out
                    self._record(
                        "restarts_exhausted",
                        severity="critical",
                        message=f"gave up: {decision.streak - 1} restarts in a row without a new checkpoint",
                        data={"streak": decision.streak, "cause": decision.cause},
                        attempt=outcome.attempt,
                    )
                return outcome
            self.restarts += 1
            self.store.update_meta(restarts=self.restarts)
            self._set_state("restarting")
            self._announce_restart(outcome, decision, resume_step)
            await self._sleep_unless_stopped(decision.delay_s)

    async def _restart_decision(self, outcome: TrainerExit) -> tuple[RestartDecision, int | None]:
        """Restart a trainer that died unasked (signal, crash, non-zero exit) from the newest
        verified checkpoint, with backoff and a limit (engine.supervisor.restart_policy decides).
        Returns the decision and the step a restart would resume from (None: step 0)."""
        newest = await asyncio.to_thread(newest_verified_step, self.run.checkpoints)
        progressed = newest is not None and newest > self._streak_checkpoint
        end = AttemptEnd(
            outcome.returncode,
            self._stop_reason is not None,
            outcome.finished_reason,
            outcome.launch_error,
            restartable=self._error_restartable is not False,
        )
        self._error_restartable = None
        decision = decide(end, self._restart_streak, progressed, self._restart_config())
        if progressed:
            self._streak_checkpoint = newest if newest is not None else -1
        self._restart_streak = decision.streak
        return decision, newest

    def _restart_config(self) -> RestartConfig:
        try:
            return self.run.read_config().restart
        except Exception:  # a damaged run.json must not stop a restart: the defaults apply
            return RestartConfig()

    def _announce_restart(
        self, outcome: TrainerExit, decision: RestartDecision, resume_step: int | None
    ) -> None:
        """trainer_exited for the attempt that died, then trainer_restarted with the cost."""
        returncode = outcome.returncode if outcome.returncode is not None else 0
        self._record(
            "trainer_exited",
            severity="warning",
            message=f"{describe_exit(returncode)} (attempt {outcome.attempt})"
            + (f": {outcome.last_error}" if outcome.last_error else ""),
            data={
                "attempt": outcome.attempt,
                "returncode": returncode,
                "signal": signal_name(returncode),
                "reason": decision.cause,
                "error": outcome.last_error,
            },
            attempt=outcome.attempt,
        )
        last_step = self.latest.step if self.latest is not None else 0
        resume = resume_step or 0
        steps_lost = max(0, last_step - resume)
        self._record(
            "trainer_restarted",
            severity="warning",
            message=(
                f"trainer {decision.cause}; restarting from step {resume} in {decision.delay_s:.1f} s "
                f"({steps_lost} steps lost; restart {self.restarts})"
            ),
            data={
                "cause": decision.cause,
                "returncode": returncode,
                "signal": signal_name(returncode),
                "last_step": last_step,
                "resume_step": resume,
                "steps_lost": steps_lost,
                "delay_s": decision.delay_s,
                "restarts": self.restarts,
                "streak": decision.streak,
                "next_attempt": self.attempt + 1,
            },
            attempt=outcome.attempt,
        )
        if self.alerts is not None:
            self.alerts.on_restart(f"{decision.cause}, restart {self.restarts}", {"cause": decision.cause})

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        """The restart backoff; a stop request cuts it short (polled: s resolution 0.05)."""
        deadline = time.monotonic() + seconds
        while self._stop_reason is None and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(0.05, left))

    async def _run_attempt(self) -> TrainerExit:
        self.attempt += 1
        attempt = self.attempt
        self._finished_reason = self._last_error = None
        if self._stop_reason is not None:
            return TrainerExit(attempt, None)
        command = [*self.trainer_cmd, str(self.run.path), "--attempt", str(attempt)]
        if self._fresh_pending:  # memtui resume --fresh: once, for the first attempt
            command.append("--fresh")
            self._fresh_pending = False
        try:
            proc = await self._launch(command, attempt)
        except OSError as err:
            reason = f"could not launch the trainer ({shlex.join(command)}): {err.strerror or err}"
            self._record("trainer_launch_failed", severity="critical", message=reason, attempt=attempt)
            return TrainerExit(attempt, None, launch_error=reason)
        self._proc = proc
        self.store.update_meta(attempt=attempt, trainer_pid=proc.pid)
        self._record(
            "trainer_launched",
            message=f"trainer attempt {attempt} started (pid {proc.pid})",
            data={"attempt": attempt, "pid": proc.pid, "command": command},
            attempt=attempt,
        )
        if self.alerts is not None:
            self.alerts.trainer_launched()  # the heartbeat clock starts here
        if self._stop_reason is not None:  # a stop arrived while it was being launched
            self._signal_trainer_stop()
        launched_at = time.time()
        returncode = await proc.wait()
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        await self._await_trainer_disconnect()
        self._proc = None
        error = self._last_error
        if returncode != 0:  # an OOM's own word first: with several ranks, rank 0 only
            error = geometry_note(self.run, since=launched_at) or error  # saw its peer vanish
        return TrainerExit(attempt, returncode, self._finished_reason, error)

    async def _launch(self, command: list[str], attempt: int) -> asyncio.subprocess.Process:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.run.trainer_log(attempt), "ab") as out:
            return await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.run.path,
                env=env,
                start_new_session=True,  # its own process group: a stop can kill torchrun's ranks too
            )

    async def _await_trainer_disconnect(self) -> None:
        """The trainer's last lines (trainer_finished) may still be in the socket."""
        link = self._trainer
        if link is None:
            return
        try:
            await asyncio.wait_for(link.closed.wait(), TRAINER_DRAIN_S)
        except asyncio.TimeoutError:
            log.warning("trainer exited but its connection stayed open; closing it")
            link.writer.close()

    def request_stop(self, reason: str = "operator") -> RunState:
        """Begin a graceful stop; returns the state the run is now in."""
        if self.state in TERMINAL_STATES or self._stop_reason is not None:
            return self.state
        self._stop_reason = reason
        self._record("stop_requested", message=f"stop requested: {reason}", data={"reason": reason})
        self._set_state("stopping")
        self._signal_trainer_stop()
        return self.state

    def request_pause(self, paused: bool, reason: str, request_id: Any = None) -> Ok | Error:
        """Hold training at the next step boundary (``paused``) or let it go on.

        The state becomes "paused" when the trainer says it holds (``run_paused``), and
        "running" again on ``run_continued``; a trainer started meanwhile is told at once.
        """
        if self.state in TERMINAL_STATES or self._stop_reason is not None:
            return Error(id=request_id, reason=f"the run is {self.state}: there is no training to pause")
        if paused != self._hold:
            self._hold = paused
            self.store.update_meta(hold=paused)
            verb = "pause" if paused else "continue"
            self._record(f"{verb}_requested", message=f"{verb} requested: {reason}", data={"reason": reason})
            if self._trainer is not None:
                self._trainer.send(TrainerCommand(command="pause" if paused else "resume", reason=reason))
        return Ok(id=request_id, result={"state": self.state, "paused": paused})

    def _signal_trainer_stop(self) -> None:
        proc = self._proc
        if self._trainer is not None:
            self._trainer.send(TrainerCommand(command="stop", reason=self._stop_reason or ""))
        elif proc is not None and proc.returncode is None:
            kill_group(proc.pid, signal.SIGTERM)  # it never connected: the classic way
        if proc is not None and proc.returncode is None:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            self._kill_timer = asyncio.get_running_loop().call_later(self.stop_grace_s, self._kill_trainer)

    def _kill_trainer(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            log.warning("killing trainer pid %d (SIGKILL)", proc.pid)
            kill_group(proc.pid, signal.SIGKILL)

    # ------------------------------------------------------------ state and events

    def _set_state(self, to: RunState) -> None:
        if to == self.state:
            return
        before, self.state = self.state, to
        self.store.update_meta(state=to)
        self._record("state_changed", message=f"{before} -> {to}", data={"from": before, "to": to})

    def _record(
        self,
        type: str,
        *,
        severity: Severity = "info",
        message: str = "",
        data: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> Event:
        """Store an event (committed), then tell every console."""
        event = self.store.append_event(type, severity=severity, message=message, data=data, attempt=attempt)
        log.info("event %d %s %s", event.seq, event.type, event.message)
        for client in list(self._clients):
            if client.closed:
                self._clients.discard(client)
            else:
                client.push_event(event)
        return event

    def status(self) -> RunStatus:
        """The same answer ``offline_status`` gives, plus the newest in-memory sample."""
        latest = self.latest or self.store.latest_step()
        return compose_status(
            self.run,
            self.store.read_meta(),
            latest,
            self.store.last_seq(),
            supervisor_alive=True,
            rank_report=rank_report(self.store, latest),
        )

    def _on_step(self, sample: TelemetrySample) -> None:
        self.store.add_step(sample)
        self.latest = sample
        if self.state in ("starting", "restarting"):
            self._set_state("running")
        for client in list(self._clients):
            client.offer_telemetry(sample, self.state)
        if self.alerts is not None:
            self.alerts.on_step(sample)
        if self.directives is not None:
            try:
                self.directives.on_step(sample)
                if self.planner is not None:
                    self.planner.on_step(sample, self._spawn)  # asks in its own task
            except Exception:  # a planner bug must not cost the run its supervisor
                log.exception("directive planner failed on step %d", sample.step)

    def _on_trainer_event(self, message: TrainerEvent) -> None:
        self._record(
            message.type,
            severity=message.severity,
            message=message.message,
            data=message.data,
            attempt=self.attempt,
        )
        if message.type == "trainer_started" and self.state in ("starting", "restarting"):
            self._set_state("running")
        elif message.type == "run_paused" and self.state == "running":
            self._set_state("paused")  # no heartbeat alert while paused: no step is expected
        elif message.type == "run_continued" and self.state == "paused":
            self._set_state("running")
            if self.alerts is not None:
                self.alerts.trainer_launched()  # the heartbeat clock starts again
        elif message.type == "trainer_finished":
            self._finished_reason = str(message.data.get("reason") or "") or None
        elif message.type == "trainer_error":
            self._last_error = message.message or None
            self._error_restartable = message.data.get("restartable")  # False: a restart cannot help

    # ---------------------------------------------------------------- connections

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._converse(reader, writer)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection handler failed")
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        creds = peer.peer_credentials(writer.get_extra_info("socket"))
        refused = peer.refusal(creds, self.owner_uid)
        if refused is not None:
            log.warning("connection %s", refused)
            await _say_and_close(writer, Error(reason=refused))
            return
        hello = await self._read_hello(reader, writer)
        if hello is None:
            return
        if hello.role == "trainer":
            await self._serve_trainer(reader, writer, creds.pid if creds else None)
        else:
            await self._serve_console(hello, reader, writer)

    async def _read_hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Hello | None:
        try:
            line = await asyncio.wait_for(read_line(reader), HELLO_TIMEOUT_S)
            if line is None:
                return None
            return check_hello(decode_client(line))
        except ProtocolError as err:
            await _say_and_close(writer, Error(id=err.request_id, reason=err.reason))
        except asyncio.TimeoutError:
            await _say_and_close(writer, Error(reason=f"no hello within {HELLO_TIMEOUT_S:.0f} s"))
        except (ConnectionError, OSError):
            pass
        return None

    def _welcome(self) -> Welcome:
        return Welcome(run_id=self.run.run_id, state=self.state, last_seq=self.store.last_seq())

    async def _serve_console(
        self, hello: Hello, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        client = ConsoleClient(writer, hello)
        # No await between reading last_seq and joining the fan-out: nothing can slip between.
        welcome = self._welcome()
        client.send(welcome)
        client.sent_seq = welcome.last_seq
        self._clients.add(client)
        if self.latest is not None:
            client.offer_telemetry(self.latest, self.state)
        if self.alerts is not None and self.alerts.latest is not None:
            client.offer_hardware(self.alerts.latest)
        try:
            if hello.replay_from is not None:
                await self._replay(client, hello.replay_from)
            await self._console_requests(client, reader)
        finally:
            self._clients.discard(client)
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

    async def _console_requests(self, client: ConsoleClient, reader: asyncio.StreamReader) -> None:
        async for message in decoded_lines(reader, client.send):
            if client.closed:
                return
            if isinstance(message, (Approve, Clamp, Reject, Propose)):
                wait_s = self._directive_pacer.delay()  # a flood must not starve the trainer
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
            await self._answer(client, message)

    async def _answer(self, client: ConsoleClient, message: Any) -> None:
        if isinstance(message, Status):
            client.send(Ok(id=message.id, result=self.status().model_dump(mode="json")))
        elif isinstance(message, Ping):
            client.send(Ok(id=message.id, result={"time": time.time()}))
        elif isinstance(message, Stop):
            state = self.request_stop(message.reason)
            client.send(Ok(id=message.id, result={"state": state}))
        elif isinstance(message, Pause):
            client.send(self.request_pause(message.paused, message.reason, message.id))
        elif isinstance(message, Replay):
            count = await self._replay(client, message.since)
            client.send(Ok(id=message.id, result={"replayed": count}))
        elif isinstance(message, Chaos):
            client.send(self._chaos(message))
        elif isinstance(message, (Approve, Clamp, Reject, Propose)):
            client.send(answer_request(self.directives, message))
        elif isinstance(message, Hello):
            client.send(Error(reason="hello already received on this connection"))
        else:
            client.send(Error(reason=f"{message.kind!r} is accepted only from the trainer"))

    def _chaos(self, message: Chaos) -> Ok | Error:
        """An operator's failure injection: record it, then do it (only kill_trainer for now)."""
        if message.action != "kill_trainer":
            return Error(id=message.id, reason=f"chaos {message.action!r} is not available yet")
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return Error(id=message.id, reason="no trainer is running to kill")
        self._record(
            "chaos",
            severity="warning",
            message=f"chaos: kill_trainer (SIGKILL pid {proc.pid})",
            data={"action": message.action, "params": message.params, "pid": proc.pid},
            attempt=self.attempt,
        )
        kill_group(proc.pid, signal.SIGKILL)
        return Ok(id=message.id, result={"action": message.action, "pid": proc.pid})

    async def _serve_trainer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pid: int | None
    ) -> None:
        if self._trainer is not None:
            await _say_and_close(
                writer, Error(reason=f"a trainer is already connected (pid {self._trainer.pid})")
            )
            return
        link = self._trainer = TrainerLink(writer, pid)
        log.info("trainer connected (pid %s)", pid)
        link.send(self._welcome())
        if self._stop_reason is not None:
            link.send(TrainerCommand(command="stop", reason=self._stop_reason))
        elif self._hold:  # paused before this attempt started: it holds at its first boundary
            link.send(TrainerCommand(command="pause", reason="the run is paused"))
        if self.directives is not None:
            self.directives.trainer_connected()  # what it missed, and the values in effect
        try:
            await self._trainer_lines(link, reader)
        finally:
            link.closed.set()
            if self._trainer is link:
                self._trainer = None
            log.info("trainer disconnected (pid %s)", pid)

    async def _trainer_lines(self, link: TrainerLink, reader: asyncio.StreamReader) -> None:
        async for message in decoded_lines(reader, link.send):
            if isinstance(message, StepReport):
                self._on_step(message.sample)
            elif isinstance(message, TrainerEvent):
                if self.directives is not None and self.directives.on_trainer_event(message):
                    pass  # directive_applied: recorded by the queue with its DirectiveView
                elif message.type in SUPERVISOR_EVENTS:
                    link.send(Error(reason=f"event type {message.type!r} is the supervisor's to record"))
                else:
                    self._on_trainer_event(message)
            elif isinstance(message, Ping):
                link.send(Ok(id=message.id))
            else:
                link.send(Error(reason=f"{message.kind!r} is not a trainer message"))


# ------------------------------------------------------------------------ helpers


async def _say_and_close(writer: asyncio.StreamWriter, message: BaseModel) -> None:
    with contextlib.suppress(Exception):
        writer.write(encode(message))
        await asyncio.wait_for(writer.drain(), 1.0)
    writer.close()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------- entry point


def main(run_dir: Path, *, stop_grace_s: float = STOP_GRACE_S, fresh_start: bool = False) -> int:
    """``python -m engine supervise RUN_DIR``: log to stdout (supervisor.log), serve, exit."""
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the loop's handler takes over
    run = RunDir(Path(run_dir).resolve())
    supervisor = Supervisor(
        run,
        default_trainer_command(ranks=configured_ranks(run)),
        stop_grace_s=stop_grace_s,
        fresh_start=fresh_start,
    )
    try:
        return asyncio.run(supervisor.serve(handle_signals=True))
    except SupervisorError as err:
        log.error("%s", err)
        return 2
