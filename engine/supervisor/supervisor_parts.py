"""How each of the supervisor's parts is built from the validated config, so that the
daemon's ``_wire`` reads as the wiring diagram: one line per part and what it is connected
to. What a part needs later than it is built (the attempts, built after the alert watch
that they tell of each launch) it reads through a callable. Torch-free.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.alerts.watch import AlertWatch
from engine.checkpoints.store import newest_verified_step
from engine.config.run_config import RunConfig
from engine.directives.failed_sizes import stored_ooms
from engine.directives.planners.factory import Planner
from engine.directives.queue import DirectiveQueue
from engine.doctor.examiner import ops_required_by
from engine.domain import TelemetrySample
from engine.run.directory import RunDir
from engine.run.meta import RunMeta
from engine.supervisor.channel.trainer_link import TrainerSeat
from engine.supervisor.chaos.desk import ChaosDesk
from engine.supervisor.hangs.hang_recovery import HangRecovery
from engine.supervisor.intake.health_feed import HealthFeed
from engine.supervisor.intake.trainer_reports import StepConsumer
from engine.supervisor.journal import Journal
from engine.supervisor.rendezvous.rendezvous_watch import RendezvousWatch
from engine.supervisor.trainers.attempts import Attempts
from engine.supervisor.trainers.core_loans import CoreLoans
from engine.supervisor.trainers.rollback_restart import RollbackDesk
from engine.supervisor.trainers.standby import standby_for
from engine.supervisor.trainers.trainer_process import Placement, default_trainer_command

log = logging.getLogger(__name__)


def directive_queue(config: RunConfig, journal: Journal, send: Callable[[Any], bool]) -> DirectiveQueue:
    """The directive queue, sending through ``send``, with the OOMs an earlier supervisor was told."""
    queue = DirectiveQueue(config, journal.record, send, keep=journal.store.add_decision)
    queue.ooms.update(stored_ooms(journal.store))
    journal.watchers.append(queue.on_event)  # chaos, for the directives' measured effects
    return queue


def alert_watch(
    config: RunConfig,
    run: RunDir,
    journal: Journal,
    health: HealthFeed,
    attempts: Callable[[], Attempts],
    loans: CoreLoans,
) -> AlertWatch:
    """The alert rules and timers; alerts are recorded through the health feed (the policy's
    ``problems``), hardware readings go to every console, the op survey's child borrows a
    core from training while it runs. ``attempts``: built after the watch."""
    follower = Placement.of(config).follower
    return AlertWatch(
        config.alerts,
        health.record,
        memory=config.memory,
        run_dir=run.path,
        checkpoint_dir=run.checkpoints,
        pids=lambda: {"supervisor": os.getpid(), **attempts().pids()},
        # a follower node's ranks report to node 0's supervisor, never to this one
        expecting_steps=lambda: not follower and journal.state == "running" and attempts().pid is not None,
        on_hardware=journal.consoles.offer_hardware,
        required_ops=ops_required_by(config),
        share_cores=loans.lender("op survey"),
    )


@dataclass(frozen=True)
class TrainerLaunch:
    """How a supervisor starts its trainers, as whoever started the supervisor asked."""

    command: list[str] | None = None
    """The trainer's command (the run dir and ``--attempt N`` are appended); None: the one
    the run's placement asks for (``trainer_process.default_trainer_command``)."""
    stop_grace_s: float | None = None
    """s from a stop to SIGKILL; None: the run's ``checkpoint.stop_grace_s``."""
    fresh_start: bool = False
    """``--fresh`` for the first trainer (``memtui resume --fresh``)."""
    head_start: subprocess.Popen[bytes] | None = None
    """The spare started for the first attempt before the supervisor was built
    (``spare_launch.head_start``), for the standby to adopt."""


def trainer_attempts(
    config: RunConfig,
    run: RunDir,
    journal: Journal,
    alerts: AlertWatch,
    before: RunMeta,
    launch: TrainerLaunch,
    seat: TrainerSeat,
    latest_step: Callable[[], int],
    spawn: Callable[..., Any],
    loans: CoreLoans,
) -> Attempts:
    """The trainer's attempts, counting on from ``before``, talking to the trainer in ``seat``;
    a warming spare borrows a core from training through ``loans``."""
    place, command, grace = Placement.of(config), launch.command, launch.stop_grace_s
    attempts = Attempts(
        run,
        journal,
        default_trainer_command(place=place) if command is None else command,
        config.restart,
        alerts,
        ranks=config.train.ranks,
        follower=place.follower,
        stop_grace_s=config.checkpoint.stop_grace_s if grace is None else grace,
        fresh_start=launch.fresh_start,
        link=seat.current,
        latest_step=latest_step,
        attempt=before.attempt,
        restarts=before.restarts,
        hold=before.hold,
        standby=standby_for(
            config, run, journal, spawn, command is not None, loans.lender("spare"), launch.head_start
        ),
    )
    if before.attempt > 0:  # memtui resume: the first attempt picks up where the last one was
        attempts.resumption.expect(latest_step(), newest_verified_step(run.checkpoints))
    return attempts


def rollback_desk(
    config: RunConfig, run: RunDir, journal: Journal, attempts: Attempts, directives: DirectiveQueue
) -> RollbackDesk | None:
    """Rollbacks for the directive queue to offer and perform; None on a follower node (node
    0 owns the run's checkpoints and restarts)."""
    if Placement.of(config).follower:
        return None
    desk = RollbackDesk(run, journal, attempts)
    directives.checkpoints, directives.perform_rollback = desk.verified, desk.perform
    return desk


def hang_recovery(
    config: RunConfig,
    journal: Journal,
    attempts: Attempts,
    meeting: RendezvousWatch | None,
    latest_step: Callable[[], int],
) -> HangRecovery:
    """The hang watch; a wait at the rendezvous is the rendezvous watch's to bound, not its."""
    waiting = meeting.waiting if meeting is not None else (lambda: False)
    return HangRecovery(attempts, journal, config.restart.hang_s, latest_step, at_rendezvous=waiting)


def chaos_desk(
    config: RunConfig,
    run: RunDir,
    journal: Journal,
    attempts: Attempts,
    directives: DirectiveQueue,
    seat: TrainerSeat,
    latest_step: Callable[[], int],
    spawn: Callable[..., Any],
) -> ChaosDesk:
    """The chaos desk: the run's ``[chaos]`` schedule, injections sent to the trainer in ``seat``."""
    return ChaosDesk(
        run,
        journal,
        attempts,
        directives,
        config.chaos,
        trainer=seat.current,
        latest_step=latest_step,
        spawn=spawn,
        world=config.train.ranks * config.train.nodes,
    )


def planning(directives: DirectiveQueue, planner: Planner | None, spawn: Callable[..., Any]) -> StepConsumer:
    """The step consumer of the directive queue, then the planner (which asks in a task of its
    own); a bug of theirs is logged, never raised into the step's path."""

    def on_step(sample: TelemetrySample) -> None:
        try:
            directives.on_step(sample)
            if planner is not None:
                planner.on_step(sample, spawn)
        except Exception:  # a planner bug must not cost the run its supervisor
            log.exception("directive planner failed on step %d", sample.step)

    return on_step
