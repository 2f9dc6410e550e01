"""The trainer's attempts: launching each as a child process, stopping and killing it, and
restarting it after an unasked death, with backoff and a limit.

One attempt is one trainer process (torchrun with several ranks), started in a session of
its own with its output in ``logs/trainer-<attempt>.log``. When it ends,
``engine.supervisor.trainers.restart_policy.decide`` says whether the run ends or goes on from the
newest verified checkpoint; a restart is announced (``trainer_exited`` then
``trainer_restarted`` with the steps it cost) before its backoff. A stop request signals
the trainer (a command if it is connected, SIGTERM if not) and SIGKILLs its process group
after the grace. The command line and the endings are ``engine.supervisor.trainers.trainer_process``;
a restart goes to the waiting spare when there is one (``engine.supervisor.trainers.standby``).
Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from engine.alerts.watch import AlertWatch
from engine.checkpoints.store import newest_verified_step
from engine.config.run_config import RestartConfig
from engine.events import (
    ContinueRequested,
    FinalSaveMissed,
    PauseRequested,
    RestartsExhausted,
    StopRequested,
    TrainerLaunched,
    TrainerLaunchFailed,
)
from engine.run.directory import RunDir
from engine.run.node_outcome import read_node_outcome
from engine.run.reports.status import save_report
from engine.run.standby_orders import StandbyOrders
from engine.supervisor.channel.trainer_link import TrainerLink
from engine.supervisor.essential_pool import off_loop
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.exit_records import record_exit, record_restart
from engine.supervisor.trainers.rank_processes import rank_processes
from engine.supervisor.trainers.restart_policy import AttemptEnd, RestartDecision, Streak
from engine.supervisor.trainers.resumption import Resumption
from engine.supervisor.trainers.rollback_restart import PendingRollback, record_rollback
from engine.supervisor.trainers.standby import Spare, Standby
from engine.supervisor.trainers.trainer_launcher import LaunchedProcess, launch
from engine.supervisor.trainers.trainer_process import (
    TrainerExit,
    geometry_note,
    kill_group,
    trainer_environment,
)
from engine.supervisor.trainers.unannounced_saves import reconcile_saves
from engine.wire.protocol import TrainerCommand

log = logging.getLogger(__name__)

TRAINER_DRAIN_S = 2.0  # s to read a dead trainer's last lines before judging its exit


class Attempts:
    """Trainer attempts of one run, from the first launch to the one that ends the run."""

    def __init__(
        self,
        run: RunDir,
        journal: Journal,
        command: list[str],
        config: RestartConfig,
        alerts: AlertWatch,
        *,
        ranks: int,
        follower: bool = False,
        stop_grace_s: float,
        fresh_start: bool,
        link: Callable[[], TrainerLink | None],
        latest_step: Callable[[], int],
        attempt: int = 0,
        restarts: int = 0,
        hold: bool = False,
        standby: Standby | None = None,
    ) -> None:
        self.run = run
        self.journal = journal
        self.command = command
        """Command prefix; the run dir and ``--attempt N`` are appended."""
        self.config = config
        self.ranks = ranks
        self.follower = follower
        """This supervisor runs a node other than node 0: its ranks talk to no supervisor (it
        is running once they start: ``rendezvous_watch``); a clean end is read from
        ``node_outcome``, and a stop (node 0's) is restarted, to meet node 0's next attempt at
        the rendezvous."""
        self.stop_grace_s = stop_grace_s
        self.alerts = alerts
        """Told of each launch (the heartbeat clock starts) and each restart."""
        self.attempt = attempt
        """Number of the newest attempt (the run's, across supervisors)."""
        self.restarts = restarts
        self.stop_reason: str | None = None
        self.hold = hold
        """The operator paused training: kept across restarts (and, in the meta, supervisors)."""
        self.storage_hold: str | None = None
        """Why the supervisor holds training itself (the store cannot write); None: it does not.
        Apart from the operator's: an unpause does not release it, a stored write does."""
        self._link = link
        self._latest_step = latest_step
        self.standby = standby
        """The spare a restart is handed to (``engine.supervisor.trainers.standby``); None: always cold."""
        self.resumption = Resumption(journal)
        """Says where a restarted attempt really resumed, once its trainer has loaded."""
        self._fresh_pending = fresh_start  # pass --fresh to the next trainer (once)
        self._stopping = asyncio.Event()
        self._proc: LaunchedProcess | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        self._finished_reason: str | None = None  # the trainer's trainer_finished reason
        self._last_error: str | None = None  # message of its last trainer_error
        self._error_restartable: bool | None = None  # that error's "restartable"
        self._streak = Streak()  # restarts in a row without progress
        self._hung: str | None = None  # why this attempt was killed as hung (hang_recovery)
        self._ranks_seen: tuple[int, dict[str, int]] = (0, {})  # (torchrun pid, its ranks)
        self.rollback: PendingRollback | None = None  # approved: the next attempt resumes from its tag

    @property
    def held(self) -> bool:
        """Training is held at a step boundary, by the operator or by the supervisor."""
        return self.hold or self.storage_hold is not None

    def held_by(self) -> str | None:
        """Who holds training, in words (``operator``, ``storage: REASON``, both); None: nobody."""
        causes = ["operator"] if self.hold else []
        if self.storage_hold is not None:
            causes.append(f"storage: {self.storage_hold}")
        return "; ".join(causes) or None

    @property
    def pid(self) -> int | None:
        """The running trainer's pid (torchrun with several ranks), or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    # ------------------------------------------------------------------- what it says

    def note_finished(self, reason: str | None) -> None:
        """The trainer's ``trainer_finished``: why it is about to exit (completed | stopped)."""
        self._finished_reason = reason or None

    def note_error(self, message: str | None, restartable: Any) -> None:
        """The trainer's ``trainer_error``; ``restartable`` False: a restart cannot help."""
        self._last_error = message or None
        self._error_restartable = restartable

    # ---------------------------------------------------------------------- the loop

    async def run_to_end(self) -> TrainerExit:
        """Run attempts until one ends the run; returns how the last one ended."""
        while True:
            outcome = await self._run_attempt()
            decision, resume_step = await self._restart_decision(outcome)
            if decision.action == "end":
                limit = decision.limit_reached(self.config)
                if limit is not None:  # restarts were tried and ran out
                    self.journal.record(
                        RestartsExhausted(streak=decision.streak, cause=decision.cause, limit=limit),
                        f"gave up after {decision.cause}: {limit}",
                        attempt=outcome.attempt,
                    )
                    return replace(outcome, gave_up=limit)
                return outcome
            self.restarts += 1
            self.journal.store.update_meta(restarts=self.restarts)
            self.journal.set_state("restarting")
            self._announce_restart(outcome, decision, resume_step)
            with contextlib.suppress(asyncio.TimeoutError):  # a stop cuts the backoff short
                await asyncio.wait_for(self._stopping.wait(), decision.delay_s)

    async def _run_attempt(self) -> TrainerExit:
        self.attempt += 1
        attempt = self.attempt
        self._finished_reason = self._last_error = self._hung = None
        if self.stop_reason is not None:
            return TrainerExit(attempt, None)
        command = [*self.command, str(self.run.path), "--attempt", str(attempt)]
        if self._fresh_pending:  # memtui resume --fresh: once, for the first attempt
            command.append("--fresh")
            self._fresh_pending = False
        elif not self.follower:  # tags sealed but never announced go into the history
            await reconcile_saves(self.journal, self.run.checkpoints, attempt - 1 or None)
        if self.rollback is not None:  # no trainer runs now: the tags can move
            pending, self.rollback = self.rollback, None
            record_rollback(self.journal, await off_loop(pending.apply), attempt)
        try:
            proc, spare = await self._launch(command, attempt)
        except OSError as err:
            reason = f"could not launch the trainer ({shlex.join(command)}): {err.strerror or err}"
            self.journal.record(TrainerLaunchFailed(), reason, attempt=attempt)
            return TrainerExit(attempt, None, launch_error=reason)
        self._proc = proc
        self.journal.store.update_meta(attempt=attempt, trainer_pid=proc.pid)
        head_start = spare is not None and spare.head_start
        self.journal.record(
            TrainerLaunched(
                attempt=attempt, pid=proc.pid, command=command, standby=spare is not None and not head_start,
                head_start=head_start,
            ),
            f"trainer attempt {attempt} started (pid {proc.pid}{spare.note if spare else ''})",
            attempt=attempt,
        )  # fmt: skip
        if spare is not None and (warming := spare.warming(attempt)) is not None:
            self.journal.record(warming, warming.label(), attempt=attempt)
        self.alerts.trainer_launched()  # the heartbeat clock starts here
        if self.stop_reason is not None:  # a stop arrived while it was being launched
            self._signal_stop()
        launched_at = time.time()
        returncode = await proc.wait()
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        await self._await_disconnect()
        self._proc = None
        error = self._hung or self._last_error
        if returncode != 0 and self._hung is None:  # an OOM's own word first: with several ranks, rank 0 only
            error = geometry_note(self.run, since=launched_at) or error  # saw its peer vanish
        finished = self._finished_reason
        if self.follower and returncode == 0:
            finished = await off_loop(read_node_outcome, self.run, attempt)
        return TrainerExit(attempt, returncode, finished, error)

    async def _launch(self, command: list[str], attempt: int) -> tuple[LaunchedProcess, Spare | None]:
        """The attempt's trainer, and the waiting spare it is (None: started cold)."""
        orders = StandbyOrders(command[len(self.command) :], str(self.run.trainer_log(attempt)))
        spare = self.standby.take(orders) if self.standby is not None else None
        if spare is not None:
            return spare.proc, spare
        env = trainer_environment(os.environ, self.ranks)
        with open(self.run.trainer_log(attempt), "ab") as out:
            return await launch(  # forked at the user's priority, above the supervisor's
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.run.path,
                env=env,
                start_new_session=True,  # its own process group: a stop can kill torchrun's ranks too
            ), None

    async def _await_disconnect(self) -> None:
        """The trainer's last lines (trainer_finished) may still be in the socket."""
        link = self._link()
        if link is None:
            return
        try:
            await asyncio.wait_for(link.closed.wait(), TRAINER_DRAIN_S)
        except asyncio.TimeoutError:
            log.warning("trainer exited but its connection stayed open; closing it")
            link.writer.close()

    # --------------------------------------------------------------------- restarts

    async def _restart_decision(self, outcome: TrainerExit) -> tuple[RestartDecision, int | None]:
        """Restart a trainer that died unasked (signal, crash, non-zero exit) from the newest
        verified checkpoint, at once the first time of a streak, then with backoff and a limit
        (``restart_policy.Streak``): progress (a newer checkpoint, or a step beyond the
        furthest one reached when the streak began) resets the streak. Returns the decision
        and the step a restart would resume from (None: step 0). Its own threads: a hung
        planner or probe never delays it."""
        if self.rollback is not None and self.stop_reason is None:  # asked for: nothing failed
            asked = RestartDecision("restart", self.rollback.cause, 0.0, self._streak.count)
            return asked, self.rollback.tag_step
        newest = await off_loop(newest_verified_step, self.run.checkpoints)
        end = AttemptEnd(
            outcome.returncode,
            self.stop_reason is not None,
            outcome.finished_reason,
            outcome.launch_error,
            restartable=self._error_restartable is not False,
            hung=self._hung,
        )
        self._error_restartable = None
        config = self.config.model_copy(update={"on_preemption": True}) if self.follower else self.config
        return self._streak.judge(end, newest, self._latest_step(), config), newest

    def _announce_restart(
        self, outcome: TrainerExit, decision: RestartDecision, candidate: int | None
    ) -> None:
        """trainer_exited for the attempt that died, then trainer_restarted with the checkpoint
        it should resume from; the alerts and ``Resumption`` are told."""
        record_exit(self.journal, outcome, decision.cause, "warning", outcome.last_error)
        last_step = self._latest_step()
        record_restart(
            self.journal, outcome, decision, candidate, last_step=last_step, restarts=self.restarts
        )
        self.resumption.expect(last_step, candidate)
        self.alerts.on_restart(f"{decision.cause}, restart {self.restarts}", {"cause": decision.cause})

    def announce_end(self, outcome: TrainerExit, failed: bool, reason: str) -> None:
        """``trainer_exited`` for the attempt that ended the run (none if it never started)."""
        if outcome.returncode is not None:
            record_exit(self.journal, outcome, reason, "critical" if failed else "info")

    # ---------------------------------------------------- holding, stopping, killing

    def greet(self, link: TrainerLink) -> None:
        """A trainer just connected: the stop or the hold it has to know of."""
        if self.stop_reason is not None:
            link.send(TrainerCommand(command="stop", reason=self.stop_reason))
        elif self.storage_hold is not None:  # it holds at its first boundary
            why = f"the run's store cannot write: {self.storage_hold}"
            link.send(TrainerCommand(command="pause", reason=why))
        elif self.hold:  # paused before this attempt started: it holds at its first boundary
            link.send(TrainerCommand(command="pause", reason="the run is paused"))

    def set_hold(self, paused: bool, reason: str) -> None:
        """The operator's hold at the next step boundary (``paused``) or its release; recorded
        (``pause_requested`` / ``continue_requested``) and kept in the meta if it changes."""
        if paused == self.hold:
            return
        was_held, self.hold = self.held, paused
        self.journal.store.update_meta(hold=paused)
        verb = "pause" if paused else "continue"
        asked = PauseRequested(reason=reason) if paused else ContinueRequested(reason=reason)
        self.journal.record(asked, f"{verb} requested: {reason}")
        self._tell_trainer(was_held, reason)

    def hold_for_storage(self, reason: str | None) -> None:
        """Hold training while the store cannot write (``reason``: why), or release that hold
        (None); training goes on only if the operator does not hold it too."""
        if (reason is None) == (self.storage_hold is None):
            return
        was_held, self.storage_hold = self.held, reason
        if self.stop_reason is not None:
            return  # the run stops: no training to hold or to let go on
        if reason is not None:
            why = f"the run's store cannot write: {reason}"
            self.journal.record(PauseRequested(reason=why, cause="storage"), f"pause requested: {why}")
        else:
            why = "the run's store writes again" + ("; the operator's pause stays" if self.hold else "")
            self.journal.record(ContinueRequested(reason=why, cause="storage"), f"continue requested: {why}")
        self._tell_trainer(was_held, why)

    def _tell_trainer(self, was_held: bool, reason: str) -> None:
        """Pause or resume the connected trainer if the holds together changed (not while it stops)."""
        link = self._link()
        if self.held != was_held and link is not None and self.stop_reason is None:
            link.send(TrainerCommand(command="pause" if self.held else "resume", reason=reason))

    def stop(self, reason: str) -> None:
        """Stop the run (once; not an ended one): recorded, state ``stopping``, no further
        attempt, and the running one asked to stop (SIGKILL after the grace)."""
        if self.journal.ended or self.stop_reason is not None:
            return
        self.stop_reason = reason
        self.journal.record(StopRequested(reason=reason), f"stop requested: {reason}")
        self.journal.set_state("stopping")
        self._stopping.set()
        if self.standby is not None:
            self.standby.retire()
        self._signal_stop()

    def _signal_stop(self) -> None:
        proc, link = self._proc, self._link()
        if link is not None:
            link.send(TrainerCommand(command="stop", reason=self.stop_reason or ""))
        elif proc is not None and proc.returncode is None:
            kill_group(proc.pid, signal.SIGTERM)  # it never connected: the classic way
        if proc is not None and proc.returncode is None:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            self._kill_timer = asyncio.get_running_loop().call_later(
                self.stop_grace_s, self._kill_after_grace
            )

    def _kill_after_grace(self) -> None:
        """The stopping trainer did not end within the grace: say that its final save is
        missed (unless a save of its newest step is in), then kill it."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        step = self._latest_step()
        saved = save_report(self.journal.store)
        if self._finished_reason is None and not (saved and saved.outcome == "saved" and saved.step >= step):
            why = f"the trainer did not stop within {self.stop_grace_s:g} s of the stop and was killed"
            self.journal.record(
                FinalSaveMissed(step=step, tag=f"global_step{step}", reason=why),
                f"final save missed at step {step}: {why}",
                attempt=self.attempt,
            )
        self.kill()

    def kill_hung(self, reason: str) -> None:
        """End a trainer taken for hung (``reason``: how long it was quiet); the restart
        decision treats it as an unasked death whose cause is the hang."""
        if self._proc is not None and self._proc.returncode is None:
            self._hung = reason
            self.kill()

    def stack_targets(self) -> list[int]:
        """The processes asked for their stacks: each rank (torchrun's), else the trainer."""
        launcher = self.pid
        if launcher is None:
            return []
        return list(self._rank_pids(launcher).values()) or [launcher]

    def kill(self) -> None:
        """SIGKILL the running trainer's process group (and torchrun's ranks), if any."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            log.warning("killing trainer pid %d (SIGKILL)", proc.pid)
            kill_group(proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        """Leave no trainer behind (a running one here means the supervisor crashed or was cancelled)."""
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        if self.standby is not None:
            await self.standby.close()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5.0)

    # ---------------------------------------------------------------- processes

    def pids(self) -> dict[str, int]:
        """The trainer's processes for the hardware panel: itself and (torchrun) its ranks."""
        launcher = self.pid
        if launcher is None:
            return {}
        return {"trainer": launcher, **self._rank_pids(launcher)}

    def _rank_pids(self, launcher: int) -> dict[str, int]:
        """torchrun's rank processes, found once per attempt (none for a single rank)."""
        if self.ranks == 1:
            return {}
        if self._ranks_seen[0] != launcher or len(self._ranks_seen[1]) < self.ranks:
            self._ranks_seen = (launcher, rank_processes(launcher))
        return self._ranks_seen[1]
