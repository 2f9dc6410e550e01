"""The supervisor: the asyncio daemon that is the run (``python -m engine supervise RUN_DIR``).

It takes the run directory first (its lock, held for the supervisor's life, then the pid
file: ``engine.run.ownership``; a second supervisor leaves before touching anything), opens
the store, reads and validates ``run.json`` once, then wires the parts (``_wire`` is the
wiring diagram; ``supervisor_parts`` builds them): the journal (events stored, then told to
its watchers, the one fan-out of events; the run's state), the connection server (consoles
and the trainer on ``engine.sock``), the trainer's reports (its steps go to one ordered list
of step consumers), the trainer attempts (launch, stop, restart), alerts and health,
directives and planners, chaos (injections, their recovery, the schedule). It runs attempts
until one ends the run and records the ending. A run.json that cannot be used ends the run
as failed with the reason before anything starts. Torch-free, so it starts in a blink and
survives whatever the trainer does.

What the disk does is survived too: a store that cannot write holds training until it can
(``storage_outage``), a log file that refuses lines costs the lines (``log_output``), and
every background task is watched (``background_tasks``): an unexpected exception in one is
logged and raised as an alert, and ends the run as failed when the run cannot go on
without the task. run.json is read once, at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from typing import Any

from engine.alerts.watch import AlertWatch
from engine.config.config_file import ConfigError
from engine.config.run_config import RunConfig
from engine.directives.operator_request import answer_request
from engine.directives.planners.factory import Planner, build_planner
from engine.directives.queue import DirectiveQueue
from engine.domain import RunState, RunStatus, TelemetrySample
from engine.events import SocketRestored
from engine.hardware_report import HardwareSnapshot
from engine.run.directory import RunDir
from engine.run.meta import RunMeta
from engine.run.ownership import Ownership, OwnershipRefused
from engine.run.reports.status import (
    RunIdentity,
    compose_status,
    eval_report,
    node_role,
    rank_report,
    save_report,
    whole_tree_resumes,
)
from engine.run.reports.throughput import ThroughputTally, throughput_or_none
from engine.run.storage.store import Store
from engine.supervisor import supervisor_parts as parts
from engine.supervisor.background_tasks import BackgroundTasks, failure_alert
from engine.supervisor.channel.connections import ConnectionServer
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.channel.served import DirectiveRequest
from engine.supervisor.channel.trainer_link import TrainerSeat
from engine.supervisor.chaos import desk as chaos
from engine.supervisor.hangs.hang_recovery import HangRecovery
from engine.supervisor.intake.checkpoint_watch import CheckpointWatch
from engine.supervisor.intake.health_feed import HealthFeed
from engine.supervisor.intake.run_progress import RunProgress
from engine.supervisor.intake.spool_intake import outlast_orphan, take_in
from engine.supervisor.intake.trainer_reports import TrainerReports
from engine.supervisor.journal import Journal
from engine.supervisor.metrics.metrics_endpoint import serve_metrics
from engine.supervisor.rendezvous.rendezvous_watch import RendezvousWatch, rendezvous_watch
from engine.supervisor.stop_signals import install_stop_signals
from engine.supervisor.storage_outage import StorageOutage
from engine.supervisor.trainers.attempts import Attempts
from engine.supervisor.trainers.core_loans import CoreLoans
from engine.supervisor.trainers.trainer_process import TrainerExit, ending
from engine.wire.protocol import Chaos, Error, Ok

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5  # s between batched step writes (the store also flushes at 256 rows)
CLIENT_DRAIN_S = 2.0  # s consoles get at the end to receive the final events


class SupervisorError(RuntimeError):
    """The supervisor cannot serve this run (e.g. another supervisor already does)."""


class Supervisor:
    """One run's daemon. ``await serve()`` runs the run to its end: 0, or 1 if it could not."""

    def __init__(
        self,
        run: RunDir,
        trainer_cmd: list[str] | None = None,
        *,
        stop_grace_s: float | None = None,
        owner_uid: int | None = None,
        fresh_start: bool = False,
        config: RunConfig | None = None,
        head_start: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.run = run
        command = list(trainer_cmd) if trainer_cmd is not None else None
        self.launch = parts.TrainerLaunch(command, stop_grace_s, fresh_start, head_start)
        self.owner_uid = os.getuid() if owner_uid is None else owner_uid  # only its peers connect
        self.config = config  # validated; read once from run.json by serve() unless given
        self.serving = asyncio.Event()
        """Set once the socket accepts connections (for in-process users)."""
        self.consoles = Consoles()
        self._throughput = ThroughputTally()  # run-wide tokens/s, read on from the last status
        self._checkpoints = CheckpointWatch(run.checkpoints)  # what status says of them
        self.health: HealthFeed | None = None
        """The newest doctor report and the alerts firing: the policy's ``problems``."""
        self.alerts: AlertWatch | None = None
        self.directives: DirectiveQueue | None = None
        self.planner: Planner | None = None
        """The configured planner (rules, a command, an OpenAI-compatible endpoint), fed each step."""
        self._store: Store | None = None
        self._journal: Journal | None = None
        self._attempts: Attempts | None = None
        self._connections: ConnectionServer | None = None
        self._reports: TrainerReports | None = None
        self._progress: RunProgress | None = None
        self._outage: StorageOutage | None = None
        self._chaos: chaos.ChaosDesk | None = None
        self._hangs: HangRecovery | None = None
        self._rendezvous: RendezvousWatch | None = None  # several nodes: the waits at the rendezvous
        self._ownership: Ownership | None = None  # the run directory's lock, from _claim to _close
        self._tasks = BackgroundTasks(self._task_failed)
        self._failure: str | None = None  # why the run ends as failed, whatever the trainer did

    @property
    def store(self) -> Store:
        assert self._store is not None, "serve() opens the store"
        return self._store

    @property
    def journal(self) -> Journal:
        assert self._journal is not None, "serve() opens the journal"
        return self._journal

    @property
    def attempts(self) -> Attempts:
        assert self._attempts is not None, "serve() wires the attempts"
        return self._attempts

    @property
    def reports(self) -> TrainerReports:
        assert self._reports is not None, "serve() wires the trainer's reports"
        return self._reports

    @property
    def latest(self) -> TelemetrySample | None:
        """The newest step sample the trainer reported to this supervisor."""
        return self._progress.latest if self._progress is not None else None

    def _latest_step(self) -> int:
        """The newest step reported, by this supervisor's trainer or (before one) stored."""
        latest = self.latest or self.store.latest_step()
        return latest.step if latest is not None else 0

    @property
    def state(self) -> RunState:
        return self._journal.state if self._journal is not None else "starting"

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, handle_signals: bool = False) -> int:
        """Run to the end: open, read the config, listen, run the trainer, record the ending."""
        self._claim()
        loop = asyncio.get_running_loop()
        loop_handler = loop.get_exception_handler()
        loop.set_exception_handler(self._tasks.loop_exception_handler)
        try:
            before = await self._open()
            try:
                config = self.config if self.config is not None else self.run.read_config()
            except ConfigError as err:
                log.error("run config unusable: %s", err)
                self.journal.end("failed", f"run config unusable: {err}")
                return 1
            self._wire(config, before)
            await self._listen()
            if handle_signals:
                attempts = self.attempts  # a second signal while stopping kills the trainer
                install_stop_signals(lambda: attempts.stop_reason is not None, attempts.stop, attempts.kill)
            self.serving.set()
            await self._finish(await self.attempts.run_to_end())
            return 0
        except Exception as err:
            log.exception("supervisor failed")
            if self._journal is not None and not self.journal.ended:
                with contextlib.suppress(Exception):
                    self.journal.end("failed", f"supervisor error: {type(err).__name__}: {err}")
            return 1
        finally:
            await self._close()
            loop.set_exception_handler(loop_handler)

    def _claim(self) -> None:
        """Take the run dir before anything of it is written: its lock, then the pid file.
        Another supervisor holding it (or a lock or pid file the disk refuses) is a
        SupervisorError, with the store, the socket and the pid file left as they are."""
        self.run.ensure_layout()
        try:
            self._ownership = Ownership.take(self.run)
        except OwnershipRefused as err:
            raise SupervisorError(str(err)) from None

    async def _open(self) -> RunMeta:
        """Open the store, take in what a trainer said after the last supervisor died, open
        the journal; returns the meta the previous supervisor left."""
        store = self._store = Store(self.run.store)
        outlived = await outlast_orphan(self.run, store.read_meta().trainer_pid)
        intake = take_in(self.run, store)
        self._journal = Journal(store, self.consoles)
        log.info("supervising %s (pid %d)", self.run.path, os.getpid())
        outlived = outlived or intake.reached(store.read_meta().attempt)
        pid = os.getpid()
        before = self.journal.begin(self.run.run_id, str(self.run.path), pid, trainer_outlived=outlived)
        intake.record(self.journal)
        return before

    def _wire(self, config: RunConfig, before: RunMeta) -> None:
        """The wiring diagram: each part and what it is connected to (built in
        ``supervisor_parts``). The journal's watchers hear each event in the order their parts
        are built here, the run's progress and the trainer's reports last: what a trainer's event
        moves follows what every other part made of it. The trainer's reports go from the
        connection straight to ``reports``."""
        self.config, policy = config, config.policy
        run, journal, spawn, newest = self.run, self.journal, self._spawn, self._latest_step
        seat = TrainerSeat()  # the trainer connected now: the connection seats it, these parts talk to it
        directives = self.directives = parts.directive_queue(config, journal, seat.send)
        health = self.health = HealthFeed(journal, directives, require_accelerator=policy.require_accelerator)
        loans = CoreLoans(seat)  # the cores training leaves to a warming spare and the op survey
        alerts = self.alerts = parts.alert_watch(config, run, journal, health, lambda: self.attempts, loans)
        planner = self.planner = build_planner(policy, directives, journal.record, alert=alerts.record)
        attempts = self._attempts = parts.trainer_attempts(
            config, run, journal, alerts, before, self.launch, seat, newest, spawn, loans
        )
        parts.rollback_desk(config, run, journal, attempts, directives)  # offered by the directives
        meeting = self._rendezvous = rendezvous_watch(config, journal, attempts, self._end_run)
        hangs = self._hangs = parts.hang_recovery(config, journal, attempts, meeting, newest)
        desk = self._chaos = parts.chaos_desk(config, run, journal, attempts, directives, seat, newest, spawn)
        progress = self._progress = RunProgress(
            journal, journal.store, self.consoles, alerts
        )  # steps, start-up, state
        # A step's consumers, in this order: the hang watch's clock, the run's progress (store,
        # state, consoles), the alert rules, the directives then the planner, the chaos desk.
        plan = parts.planning(directives, planner, spawn)
        steps = (hangs.on_step, progress.on_step, alerts.on_step, plan, desk.on_step)
        reports = self._reports = TrainerReports(journal, attempts, directives, planner, steps)
        self._connections = ConnectionServer(
            self, reports, seat, self.store, self.consoles, run_id=run.run_id, owner_uid=self.owner_uid,
            thresholds=config.thresholds(), chaos=chaos.advertised(), on_failure=self._tasks.report,
        )  # fmt: skip
        self._outage = StorageOutage(  # from now on a refused store write holds training
            self.store, attempts, config.storage, raise_alerts=alerts.raise_all, spawn=spawn,
            end_run=self._end_run,
        )  # fmt: skip

    async def _listen(self) -> None:
        assert self._connections is not None and self.alerts is not None
        await self._connections.listen(self.run.socket)
        self._spawn(self.journal.keep_flushing(FLUSH_INTERVAL_S), "store flush", essential=True)
        self._spawn(self._connections.keep_bound(self._socket_restored), "socket watch")
        self.alerts.resolve_stale(self.store.events_since(0))  # a previous supervisor's, left firing
        self._spawn(self.alerts.run(), "alert timers")
        assert self.config is not None  # _wire set it
        self._spawn(serve_metrics(self.config.metrics, self, self.alerts.raise_all), "metrics endpoint")
        assert self._chaos is not None
        self._spawn(self._chaos.keep_watch(), "chaos recovery deadlines")
        assert self._hangs is not None
        self._spawn(self._hangs.run(), "hang watch")  # should it fail: an alert, training goes on
        if self._rendezvous is not None:
            self._spawn(self._rendezvous.run(), "rendezvous watch")
        self._spawn(self._checkpoints.run(), "checkpoint watch")

    def _socket_restored(self) -> None:
        said = f"{self.run.socket.name} was removed: the supervisor listens there again"
        self.journal.record(SocketRestored(), said)

    async def _finish(self, outcome: TrainerExit) -> None:
        state, reason = ending(outcome, self.attempts.stop_reason)
        if self._failure is not None:  # the supervisor ended it (its store, a task it needs)
            state, reason = "failed", self._failure
        self.attempts.announce_end(outcome, state == "failed", reason)
        if self.directives is not None:
            self.directives.end_run(f"run {state}: {reason}" if reason else f"run {state}")
        if self._chaos is not None:
            self._chaos.settle(state)
        self.journal.end(state, reason)
        await self.consoles.drain(CLIENT_DRAIN_S)

    async def _close(self) -> None:
        """Release everything; the run dir is left without its socket and pid file, and the
        lock goes last (a next supervisor starts only once this one has finished)."""
        if self._outage is not None:
            await self._outage.settle()  # the ending, if the store still refuses it
        if self._attempts is not None:
            await self._attempts.close()  # kills a trainer only after a crash or a cancel
        if self._connections is not None:
            await self._connections.close()
        if self.planner is not None:
            with contextlib.suppress(Exception):
                await self.planner.close()  # kills a planner command
        if self.alerts is not None:
            await self.alerts.close()  # alert commands in flight finish (each within its timeout)
        await self._tasks.close()
        if self._store is not None:
            self._store.close()
        if self._ownership is not None:
            self._ownership.release()

    def _spawn(self, coro: Any, name: str | None = None, *, essential: bool = False) -> asyncio.Task[Any]:
        return self._tasks.spawn(coro, name, essential=essential)

    def _task_failed(self, name: str, err: BaseException, essential: bool) -> None:
        """A background task ended with an exception (logged already): a critical alert, and
        the run's end as failed when it cannot go on without the task."""
        alert = failure_alert(name, err, essential)
        if self.alerts is not None:
            self.alerts.raise_all([alert])
        elif self._journal is not None:
            self.journal.record(alert.payload(), alert.message, severity=alert.severity)
        if essential:
            self._end_run(f"supervisor task {name!r} failed: {type(err).__name__}: {err}")

    def _end_run(self, reason: str) -> None:
        """Stop the run and end it as failed with ``reason`` (the first reason given wins)."""
        if self._failure is None:
            self._failure = reason
        if self._attempts is not None:
            self.attempts.stop(reason)

    # ------------------------------------------ what the consoles ask of the run (Served)

    def status(self) -> RunStatus:
        """The same answer ``offline_status`` gives, plus the newest in-memory sample."""
        latest = self.latest or self.store.latest_step()
        assert self.config is not None, "serve() reads the config"
        train = self.config.train
        node = node_role(train.nodes, train.node_rank, train.rdzv_endpoint)
        identity = RunIdentity(self.run.run_id, self.config.name, self.config.steps, node)
        return compose_status(
            self.run,
            identity,
            self.store.read_meta(),
            latest,
            self.store.last_seq(),
            supervisor_alive=True,
            rank_report=rank_report(self.store, latest),
            last_save=save_report(self.store),
            last_eval=eval_report(self.store),
            held_by=self.attempts.held_by() if self._attempts is not None else None,
            throughput=throughput_or_none(self.store, self._throughput),
            startup=self._progress.startup_status() if self._progress is not None else None,
            whole_tree_resumes=whole_tree_resumes(self.store),
            **self._checkpoints.standing.status_fields(),
        )

    def hardware(self) -> HardwareSnapshot | None:
        return self.alerts.latest if self.alerts is not None else None

    def request_stop(self, reason: str = "operator") -> RunState:
        """Begin a graceful stop (nothing if the run is stopping or ended); returns its state."""
        self.attempts.stop(reason)
        return self.state

    def request_pause(self, paused: bool, reason: str, request_id: Any = None) -> Ok | Error:
        """Hold training at the next step boundary (``paused``) or let it go on.

        The state becomes "paused" when the trainer says it holds (``run_paused``), and
        "running" again on ``run_continued``; a trainer started meanwhile is told at once.
        """
        if self.journal.ended or self.attempts.stop_reason is not None:
            return Error(id=request_id, reason=f"the run is {self.state}: there is no training to pause")
        held = self.attempts.storage_hold
        if not paused and held is not None:
            why = f"training is held because the run's store cannot write ({held})"
            return Error(id=request_id, reason=f"{why}; it goes on by itself once the store writes again")
        self.attempts.set_hold(paused, reason)
        return Ok(id=request_id, result={"state": self.state, "paused": paused})

    def chaos(self, message: Chaos) -> Ok | Error:
        assert self._chaos is not None, "serve() wires the chaos desk"
        return self._chaos.inject(message)

    def directive_request(self, message: DirectiveRequest) -> Ok | Error:
        return answer_request(self.directives, message)
