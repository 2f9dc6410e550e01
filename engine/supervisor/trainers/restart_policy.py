"""When the supervisor restarts a trainer, and after how long. Pure and torch-free.

A trainer that ended unasked (a signal, a crash, a non-zero exit) is restarted from the
newest verified checkpoint. Restarts that keep failing without progress form a *streak*.
The first restart of a streak goes at once: the run had progressed since its last restart,
so this is a failure, not a crash loop, and every second of waiting is a second of outage
(Kubernetes restarts a container at once the first time, then backs off; torchelastic
never waits). From the second restart of a streak on, each waits ``backoff_initial_s``,
doubled for each further one (exponential backoff), and a streak longer than
``max_restarts`` fails the run. Progress ends the streak: a new checkpoint, or a step
beyond the furthest one the run had reached when the streak began (a slow machine that is
killed before each checkpoint still trains on; a trainer that crashes at the same step
after each replay does not).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

from engine.config.run_config import RestartConfig
from engine.domain import EXIT_NO_CHECKPOINT


@dataclass(frozen=True)
class AttemptEnd:
    """What the restart decision needs to know about one finished trainer attempt."""

    returncode: int | None
    """Exit status; negative = killed by that signal; None = never started."""
    stop_requested: bool = False
    """The run was asked to stop (operator, SIGTERM to the supervisor)."""
    finished_reason: str | None = None
    """``reason`` of the trainer's trainer_finished event (completed | stopped), if any."""
    launch_error: str | None = None
    restartable: bool = True
    """False when the trainer said a restart cannot help (its trainer_error's ``restartable``)."""
    hung: str | None = None
    """Why the supervisor killed it as hung (``hang_recovery``), if it did."""


@dataclass(frozen=True)
class RestartDecision:
    action: Literal["end", "restart"]
    cause: str
    """Why the attempt ended, in words (for the restart event)."""
    delay_s: float = 0.0
    streak: int = 0
    """Restarts in a row without progress, this one included."""

    def limit_reached(self, config: RestartConfig) -> str | None:
        """The limit that ended the run, in words; None if no restart limit did (restarts
        off, ``max_restarts = 0``, is a choice: the trainer's own ending says enough)."""
        if self.action != "end" or config.max_restarts == 0 or self.streak <= config.max_restarts:
            return None
        tried = self.streak - 1
        return (
            f"restart limit reached: {tried} restart{'' if tried == 1 else 's'} in a row without "
            f"progress (restart.max_restarts = {config.max_restarts})"
        )


def cause_of(end: AttemptEnd) -> str:
    if end.launch_error is not None:
        return end.launch_error
    if end.hung is not None:
        return end.hung
    if end.returncode is None:
        return "never started"
    if end.returncode < 0:
        try:
            return f"killed by {signal.Signals(-end.returncode).name}"
        except ValueError:
            return f"killed by signal {-end.returncode}"
    if end.returncode == 0:
        return f"exited 0 ({end.finished_reason or 'without trainer_finished'})"
    if end.returncode == EXIT_NO_CHECKPOINT:
        return "refused to start: no checkpoint verifies"
    return f"exited with code {end.returncode}"


def backoff_s(streak: int, config: RestartConfig) -> float:
    """Seconds before restart number ``streak`` (1-based) of a streak: none before the first,
    ``backoff_initial_s`` before the second, doubled for each further one, at most
    ``backoff_max_s``."""
    if streak <= 1:
        return 0.0
    return min(config.backoff_initial_s * 2.0 ** (streak - 2), config.backoff_max_s)


def decide(end: AttemptEnd, streak_before: int, progressed: bool, config: RestartConfig) -> RestartDecision:
    """Restart or end after ``end``.

    ``streak_before``: restarts in a row so far; ``progressed``: a checkpoint newer than
    the one the streak began at was committed since, or a step beyond the furthest one
    reached when it began was made (either resets the streak).
    """
    cause = cause_of(end)
    if end.stop_requested or end.returncode is None or end.launch_error is not None:
        return RestartDecision("end", cause)
    if end.returncode == 0:
        preempted = end.finished_reason == "stopped" and config.on_preemption
        if not preempted:
            return RestartDecision("end", cause)
        cause = "preempted: stopped itself on a signal"
    if end.returncode == EXIT_NO_CHECKPOINT or not end.restartable:
        return RestartDecision(
            "end", cause if end.restartable else f"{cause}; the trainer said a restart cannot help"
        )
    streak = 1 if progressed else streak_before + 1
    if streak > config.max_restarts:
        return RestartDecision("end", cause, streak=streak)
    return RestartDecision("restart", cause, backoff_s(streak, config), streak)


@dataclass
class Streak:
    """The run's current streak: its length and where the run stood when it began."""

    count: int = 0
    """Restarts in a row without progress."""
    checkpoint: int = -1
    """Step of the newest verified checkpoint when the streak began (-1: none)."""
    step: int = -1
    """Furthest step the run had reached when the streak began (-1: none)."""

    def judge(
        self, end: AttemptEnd, newest: int | None, furthest: int, config: RestartConfig
    ) -> RestartDecision:
        """Restart or end after ``end`` (``decide``), given the newest verified checkpoint's
        step (None: none) and the furthest step reached now; a new checkpoint or a step
        beyond the streak's start is progress, and a new streak begins there."""
        progressed = (newest is not None and newest > self.checkpoint) or furthest > self.step
        decision = decide(end, self.count, progressed, config)
        if progressed:
            self.checkpoint = newest if newest is not None else -1
            self.step = furthest
        self.count = decision.streak
        return decision
