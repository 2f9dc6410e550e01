"""The fake engine's run and its trainer: state, stop, pause and continue, a kill's restart.

Each is recorded in the order and with the payloads the real supervisor records (its
``Attempts``, ``TrainerReports`` and ``Journal``), the trainer's part played on timers:

- Stop: ``stop_requested``, ``state_changed`` to stopping (before the answer); ``stop_after_s``
  later the trainer finishes (``trainer_finished``, ``trainer_exited``), then ``state_changed``
  to stopped and ``run_ended``. A second Stop, or one on an ended run, changes nothing.
- Pause: ``pause_requested`` (before the answer); ``pause_after_s`` later the trainer holds at
  its step boundary: ``run_paused``, then ``state_changed`` to paused. Continuing mirrors it
  (``continue_requested``, ``run_continued``, ``state_changed`` to running). A stopping or ended
  run refuses both; asking for what is already asked changes nothing.
- Chaos, every kind: ``chaos_injected`` (before the answer), or an Error and nothing recorded
  when it cannot be done (a stopping or ended run, no trainer for a trainer kind or a kill,
  no checkpoint to corrupt: the fake keeps none). ``kill`` and ``preempt``: ``state_changed``
  to restarting, ``trainer_exited`` (SIGKILL), ``trainer_restarted``, the restart ``alert``;
  ``restart_after_s`` later the next attempt: ``trainer_launched``, ``trainer_started``,
  ``state_changed`` to running (a run scripted as restarting waits for ``relaunch()``), then
  ``chaos_recovered``. A trainer kind: ``chaos_applied`` (the trainer's) and
  ``chaos_recovered`` ``pause_after_s`` later; a planner storm: ``chaos_recovered`` at once;
  dropped consoles: the fake engine closes every connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from engine.chaos.table import KINDS
from engine.domain import TERMINAL_STATES, RunState
from engine.events import (
    AlertRaised,
    ChaosApplied,
    ChaosInjected,
    ChaosRecovered,
    ContinueRequested,
    PauseRequested,
    Recorder,
    RunContinued,
    RunEnded,
    RunPaused,
    StateChanged,
    StopRequested,
    TrainerExited,
    TrainerFinished,
    TrainerRestarted,
    TrainerResumed,
)
from engine.protocol import Chaos, Error, Ok

from .run_script import FAKE_TRAINER_PID, trainer_launched, trainer_started

KILLED = "killed by SIGKILL"


class FakeLifecycle:
    """The fake run's state machine; ``record`` stores and sends each event."""

    def __init__(
        self,
        record: Recorder,
        state: RunState,
        *,
        run_dir: str,
        step: Callable[[], int],
        stop_after_s: float,
        pause_after_s: float,
        restart_after_s: float,
        performs: Sequence[str] = tuple(KINDS),
    ) -> None:
        self.record = record
        self.performs = tuple(performs)
        """The chaos kinds it accepts (the rest are refused, nothing recorded)."""
        self.state: RunState = state
        self.run_dir = run_dir
        self.step = step
        """The newest step the trainer reported."""
        self.stop_after_s = stop_after_s
        self.pause_after_s = pause_after_s
        """Seconds from a Pause request to the trainer holding (its step boundary)."""
        self.restart_after_s = restart_after_s
        """Seconds from a trainer's death to its next attempt (the restart backoff)."""
        self.hold = state == "paused"
        """The operator asked training to hold (as the real ``Attempts.hold``)."""
        self.stop_reason: str | None = None
        self.exit_reason: str | None = None
        """How the run ended, in words, once it has."""
        self.attempt = 1
        self.restarts = 0
        self._lost_from: int | None = None  # the newest step before a restart, until it resumes
        self.chaos_count = 0
        self._recovering: tuple[str, str] | None = None  # a kill's chaos id and kind, until relaunch
        self.trainer_alive = state not in TERMINAL_STATES and state != "restarting"
        self.on_stopped: Callable[[], None] | None = None
        """Called once a Stop has run its course (e.g. to play a supervisor exiting)."""
        self.on_ending: Callable[[str], None] | None = None
        """Called with the reason just before the run ends (directives expire then)."""
        self._paused_at = time.monotonic()
        self._pausing: asyncio.TimerHandle | None = None  # a hold or release on its way

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def pid(self) -> int:
        return FAKE_TRAINER_PID + self.attempt - 1

    def set_state(self, to: RunState) -> None:
        """Change state and announce it as the journal does (``state_changed`` from/to)."""
        if to == self.state:
            return
        before, self.state = self.state, to
        self.record(StateChanged(from_state=before, to=to), f"{before} -> {to}")

    # ------------------------------------------------------------------ stopping

    def request_stop(self, reason: str) -> RunState:
        if self.ended or self.stop_reason is not None:
            return self.state
        self.stop_reason = reason
        self.record(StopRequested(reason=reason), f"stop requested: {reason}")
        self.set_state("stopping")
        self._later(self.stop_after_s, self._finish_stop)
        return self.state

    def _finish_stop(self) -> None:
        why = f"on request ({self.stop_reason})"
        if self.trainer_alive:  # stopped during a restart's backoff: no trainer to finish
            step = self.step()
            self.record(TrainerFinished(reason="stopped", step=step), "stopped on request")
            exited = TrainerExited(attempt=self.attempt, returncode=0, reason=why)
            self.record(exited, f"exited with status 0 (attempt {self.attempt})")
            self.trainer_alive = False
        self.exit_reason = why
        if self.on_ending is not None:
            self.on_ending(f"run stopped: {why}")
        self.set_state("stopped")
        self.record(RunEnded(state="stopped", reason=why), f"run ended stopped: {why}")
        if self.on_stopped is not None:
            self.on_stopped()

    # ------------------------------------------------------------------- pausing

    def request_pause(self, paused: bool, reason: str, request_id: str) -> Ok | Error:
        """Ok at once (the state as it is now); the hold or release follows at a step boundary."""
        if self.ended or self.stop_reason is not None:
            return Error(id=request_id, reason=f"the run is {self.state}: there is no training to pause")
        if paused != self.hold:
            self.hold = paused
            asked = PauseRequested(reason=reason) if paused else ContinueRequested(reason=reason)
            self.record(asked, f"{'pause' if paused else 'continue'} requested: {reason}")
            if self.trainer_alive:
                self._schedule_hold()
        return Ok(id=request_id, result={"state": self.state, "paused": paused})

    def _schedule_hold(self) -> None:
        if self._pausing is not None:
            self._pausing.cancel()
        self._pausing = self._later(self.pause_after_s, self._hold if self.hold else self._release)

    def _hold(self) -> None:
        self._pausing = None
        if not self.hold or not self.trainer_alive or self.state != "running":
            return
        step = self.step()
        self._paused_at = time.monotonic()
        self.record(RunPaused(step=step), f"training paused at step {step}")
        self.set_state("paused")

    def _release(self) -> None:
        self._pausing = None
        if self.hold or self.state != "paused":
            return
        step, paused_s = self.step(), time.monotonic() - self._paused_at
        self.record(RunContinued(step=step, paused_s=paused_s), f"training continues at step {step}")
        self.set_state("running")

    # --------------------------------------------------------------------- chaos

    def chaos(self, message: Chaos) -> Ok | Error:
        """Every kind, as the real ``ChaosDesk``: refused (nothing recorded) when it cannot be
        done, else ``chaos_injected`` before the answer and ``chaos_recovered`` later."""
        request = message.request
        kind = request.kind
        refusal = self._chaos_refusal(kind)
        if refusal is not None:
            return Error(id=message.id, reason=f"chaos {kind}: {refusal}")
        pid = self.pid if kind in ("kill", "preempt") else None
        self.chaos_count += 1
        chaos_id = f"c-fake{self.chaos_count}"
        params = request.model_dump(mode="json", exclude={"kind"})
        injected = ChaosInjected(chaos_id=chaos_id, kind=kind, params=params, step=self.step(), pid=pid)
        self.record(injected, f"chaos {kind} [operator]")
        loop = asyncio.get_running_loop()
        if kind in ("kill", "preempt"):  # a preempted fake trainer restarts as on_preemption does
            self._recovering = (chaos_id, kind)
            loop.call_soon(self._killed)  # after the answer, as a death is
        elif kind == "planner_storm":
            count = int(params["count"])
            self._recovered(chaos_id, kind, f"{count} of {count} hostile directives refused, 0 admitted")
        elif KINDS[kind].performer == "trainer":
            self._later(self.pause_after_s, lambda: self._applied(chaos_id, kind))
        return Ok(id=message.id, result={"chaos_id": chaos_id, "kind": kind, "pid": pid})

    def _chaos_refusal(self, kind: str) -> str | None:
        if self.ended or self.stop_reason is not None:
            return f"the run is {self.state}: there is nothing to inject into"
        if kind not in self.performs:
            return "not performed by this engine"
        if not self.trainer_alive and (kind in ("kill", "preempt") or KINDS[kind].performer == "trainer"):
            return f"no trainer is running (the run is {self.state})"
        if kind == "corrupt_checkpoint":  # the fake keeps no checkpoints
            return "there is no verified checkpoint to corrupt yet"
        return None

    def _applied(self, chaos_id: str, kind: str) -> None:
        """The trainer's ``chaos_applied`` at its step boundary, then the run is well again."""
        step = self.step()
        self.record(ChaosApplied(chaos_id=chaos_id, kind=kind, step=step), f"chaos {kind} applied")
        self._recovered(chaos_id, kind, f"step {step} reached after {kind}")

    def _recovered(self, chaos_id: str, kind: str, detail: str) -> None:
        verdict = ChaosRecovered(chaos_id=chaos_id, kind=kind, recovered=True, seconds=0.0, detail=detail)
        self.record(verdict, f"chaos {kind} ({chaos_id}) recovered: {detail}")

    def _killed(self) -> None:
        self.trainer_alive = False
        if self.stop_reason is not None:
            return  # the stop in progress ends the run
        self.restarts += 1
        self.set_state("restarting")
        exited = TrainerExited(attempt=self.attempt, returncode=-9, signal="SIGKILL", reason=KILLED)
        self.record(exited, f"killed by SIGKILL (attempt {self.attempt})", severity="warning")
        step = self.step()
        restarted = TrainerRestarted(
            cause=KILLED,
            returncode=-9,
            signal="SIGKILL",
            last_step=step,
            candidate_step=None,  # the fake keeps no checkpoints: from the start
            delay_s=self.restart_after_s,
            restarts=self.restarts,
            streak=1,
            next_attempt=self.attempt + 1,
        )
        self.record(restarted, f"trainer {KILLED}; restarting from the start")
        self._lost_from = step
        alert = AlertRaised(rule="restart", state="firing", cause=KILLED)  # type: ignore[call-arg]
        self.record(alert, f"trainer restarted: {KILLED}, restart {self.restarts}", severity="warning")
        self._later(self.restart_after_s, self.relaunch)

    def relaunch(self) -> None:
        """The next trainer attempt reports: after a kill's backoff, or when a test says so
        for a run scripted as restarting (it stays so until then)."""
        if self.stop_reason is not None or self.ended:
            return
        self.attempt += 1
        launched = trainer_launched(self.attempt, self.pid, self.run_dir)
        self.record(launched, f"trainer attempt {self.attempt} started (pid {self.pid})")
        self.record(trainer_started(self.attempt, self.pid), f"trainer attempt {self.attempt}")
        self.trainer_alive = True
        self.set_state("running")
        if self._lost_from is not None:  # what the restart cost, said after the (fake) load
            lost, self._lost_from = self._lost_from, None
            resumed = TrainerResumed(attempt=self.attempt, resume_step=0, last_step=lost, steps_lost=lost)
            self.record(resumed, f"resumed from the start (no checkpoint): {lost} steps lost")
        if self.hold:  # told at once: it holds at its first step boundary
            self._schedule_hold()
        if self._recovering is not None:  # the new attempt trains: the kill is recovered from
            (chaos_id, kind), self._recovering = self._recovering, None
            detail = f"attempt {self.attempt} trains"
            self._later(self.pause_after_s, lambda: self._recovered(chaos_id, kind, detail))

    def _later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay_s, callback)
