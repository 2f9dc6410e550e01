"""Performing an approved rollback: the supervisor's restart path, from a chosen tag.

The queue hands an approved rollback to ``RollbackDesk.perform``; it becomes the attempts'
``rollback`` (a ``PendingRollback``) and the running trainer is killed (its steps since
the tag are given up anyway). When it is gone, the restart decision restarts at once
(no backoff, the streak unchanged: nothing failed), and before the next trainer launches
``PendingRollback.apply`` moves the newer tags aside and writes the order the trainer
reads its data cursor from (``engine.rollback``); ``rolled_back`` records it all.
Torch-free.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from engine.checkpoints import catalog
from engine.checkpoints.pins import write_pins
from engine.checkpoints.rollback_aside import set_aside_after
from engine.directives.entry import Entry
from engine.domain import Event
from engine.events import DirectiveApplied, DirectiveDecided, DirectiveProposed, RolledBack
from engine.rollback import Rollback, RollbackOrder, write_order
from engine.run.directory import RunDir
from engine.supervisor.journal import Journal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingRollback:
    """An approved rollback waiting for the trainer to be gone."""

    run: RunDir
    order: RollbackOrder

    @property
    def cause(self) -> str:
        return f"rollback to {self.order.tag} (directive {self.order.directive_id})"

    @property
    def tag_step(self) -> int:
        return Rollback(tag=self.order.tag, skip_batches=self.order.skip_batches).tag_step

    def apply(self) -> RolledBack:
        """On disk, with no trainer running: the newer tags aside, ``latest`` at the tag, the order."""
        checkpoints = self.run.checkpoints
        moved = set_aside_after(checkpoints, self.order.tag, self.order.directive_id)
        write_order(checkpoints, self.order)
        return RolledBack(
            directive_id=self.order.directive_id,
            tag=self.order.tag,
            tag_step=self.tag_step,
            from_step=self.order.from_step,
            steps_given_up=max(0, self.order.from_step - self.tag_step),
            skip_batches=self.order.skip_batches,
            set_aside=moved,
        )


class Restartable(Protocol):
    """What the desk needs of ``Attempts``."""

    rollback: PendingRollback | None

    def kill(self) -> None: ...


class RollbackDesk:
    """The queue's two hooks for rollbacks (the verified tags, and performing one), and the
    pins that keep a pending rollback's tag from the rotation until it is answered."""

    def __init__(self, run: RunDir, journal: Journal, attempts: Restartable) -> None:
        self.run = run
        self.journal = journal
        self.attempts = attempts
        self._waiting: dict[str, str] = {}  # directive id -> its tag, while pending
        write_pins(run.checkpoints, {})  # a directive does not outlive its supervisor
        journal.watchers.append(self._on_event)

    def _on_event(self, event: Event) -> None:
        record = DirectiveProposed.of(event) or DirectiveDecided.of(event) or DirectiveApplied.of(event)
        view = record.directive if record is not None else None
        if view is None or view.rollback is None:
            return
        before = dict(self._waiting)
        if view.state == "pending":
            self._waiting[view.id] = view.rollback.tag
        else:
            self._waiting.pop(view.id, None)
        if self._waiting != before:
            why = "rollback {} waits for an answer"
            write_pins(self.run.checkpoints, {tag: why.format(d) for d, tag in self._waiting.items()})

    def verified(self) -> dict[str, int]:
        """Tag -> step of every checkpoint whose manifest and file sizes check (the quick check)."""
        verdicts = catalog.verdicts_newest_first(self.run.checkpoints, "quick")
        return {v.tag: v.step for v in verdicts if v.ok}

    def perform(self, entry: Entry, step: int) -> None:
        rollback = entry.directive.rollback
        if rollback is None:
            return
        order = RollbackOrder(
            directive_id=entry.directive.id,
            tag=rollback.tag,
            skip_batches=rollback.skip_batches,
            from_step=step,
        )
        self.attempts.rollback = PendingRollback(self.run, order)
        log.warning("rolling back to %s: ending the trainer", rollback.tag)
        self.attempts.kill()


def record_rollback(journal: Journal, done: RolledBack, attempt: int) -> None:
    """The ``rolled_back`` event, in words for the timeline."""
    kept = (
        f"; {len(done.set_aside)} newer tag(s) kept in rolled_back/{done.directive_id}"
        if done.set_aside
        else ""
    )
    journal.record(
        done,
        f"rolled back to {done.tag}: {done.steps_given_up} steps given up (from step {done.from_step}), "
        f"{done.skip_batches} steps of data skipped{kept}",
        attempt=attempt,
    )
