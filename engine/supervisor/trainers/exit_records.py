"""The events that say how a trainer attempt ended: ``trainer_exited`` and, when it is
restarted, ``trainer_restarted`` with the checkpoint it should resume from. Torch-free."""

from __future__ import annotations

from engine.domain import Severity
from engine.events import TrainerExited, TrainerRestarted
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.restart_policy import RestartDecision
from engine.supervisor.trainers.trainer_process import TrainerExit, describe_exit, signal_name


def record_exit(
    journal: Journal, outcome: TrainerExit, reason: str, severity: Severity, error: str | None = None
) -> None:
    """``trainer_exited`` for an attempt that ran (its status, why, its last error)."""
    returncode = outcome.returncode if outcome.returncode is not None else 0
    exited = TrainerExited(
        attempt=outcome.attempt,
        returncode=returncode,
        signal=signal_name(returncode),
        reason=reason,
        error=error,
    )
    journal.record(
        exited,
        f"{describe_exit(returncode)} (attempt {outcome.attempt})" + (f": {error}" if error else ""),
        severity=severity,
        attempt=outcome.attempt,
    )


def record_restart(
    journal: Journal,
    outcome: TrainerExit,
    decision: RestartDecision,
    candidate: int | None,
    *,
    last_step: int,
    restarts: int,
) -> None:
    """``trainer_restarted``: why, after how long, from which checkpoint (the candidate:
    ``Resumption`` says later where the new attempt really resumed)."""
    returncode = outcome.returncode if outcome.returncode is not None else 0
    restarted = TrainerRestarted(
        cause=decision.cause,
        returncode=returncode,
        signal=signal_name(returncode),
        last_step=last_step,
        candidate_step=candidate,
        delay_s=decision.delay_s,
        restarts=restarts,
        streak=decision.streak,
        next_attempt=outcome.attempt + 1,
    )
    where = f"the checkpoint of step {candidate} (once verified)" if candidate else "the start"
    journal.record(
        restarted,
        f"trainer {decision.cause}; restarting from {where} in {decision.delay_s:.1f} s "
        f"(restart {restarts}, last step {last_step})",
        attempt=outcome.attempt,
    )
