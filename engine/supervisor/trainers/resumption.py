"""What a restart really cost, said once the new trainer has loaded its checkpoint.

When a trainer dies the supervisor knows only the newest checkpoint whose files look
complete (a quick check of sizes, no hashing: a checkpoint of many GB takes the trainer
minutes to verify). That is the *candidate* the restart is announced with. The trainer then
verifies it in full and may reject it (a corrupted file of the right size) and load an older
one. So the truth comes later: when the new attempt says ``trainer_started`` (after its
load), ``trainer_resumed`` records the step it really resumed from, the steps trained again
and the newer checkpoints it rejected on the way. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.domain import Severity
from engine.events import CheckpointLoaded, CheckpointRejected, Payload, TrainerResumed, TrainerStarted
from engine.supervisor.journal import Journal


@dataclass
class _Expected:
    last_step: int
    """Newest step reported before the restart."""
    candidate: int | None
    """The checkpoint the restart was announced with (None: none looked complete)."""
    rejected: list[str] = field(default_factory=list)
    """``tag: problem`` of every checkpoint the new trainer rejected so far."""


class Resumption:
    """Waits for the new attempt's load after a restart and records where it really resumed."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._expected: _Expected | None = None

    def expect(self, last_step: int, candidate: int | None) -> None:
        """A new attempt is coming that should resume near ``candidate``."""
        self._expected = _Expected(last_step, candidate)

    def on_event(self, payload: Payload | None, attempt: int) -> None:
        """One of the trainer's events (typed; None for a type the supervisor does not know)."""
        expected = self._expected
        if expected is None:
            return
        if isinstance(payload, CheckpointRejected):
            expected.rejected.append(f"{payload.tag}: {payload.problem}")
        elif isinstance(payload, CheckpointLoaded) and payload.skipped:
            expected.rejected = list(payload.skipped)
        elif isinstance(payload, TrainerStarted):
            self._expected = None
            self._record(expected, payload.resumed_from_step or 0, attempt)

    def _record(self, expected: _Expected, resume_step: int, attempt: int) -> None:
        lost = max(0, expected.last_step - resume_step)
        resumed = TrainerResumed(
            attempt=attempt,
            resume_step=resume_step,
            last_step=expected.last_step,
            steps_lost=lost,
            candidate_step=expected.candidate,
            skipped=expected.rejected,
        )
        where = f"step {resume_step}" if resume_step else "the start (no checkpoint)"
        message = f"resumed from {where}: {lost} steps lost"
        if not resumed.as_announced:
            announced = f"step {expected.candidate}" if expected.candidate else "no checkpoint"
            why = f" ({'; '.join(expected.rejected)})" if expected.rejected else ""
            message += f"; the announced {announced} did not verify{why}"
        severity: Severity = "info" if resumed.as_announced else "warning"
        self.journal.record(resumed, message[:4096], severity=severity, attempt=attempt)
