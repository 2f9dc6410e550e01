"""The supervisor's side of a rollback without processes: the tags newer than the one rolled
back to are kept aside (not deleted), ``latest`` points at it, the order is written, a
resume then picks the tag, and the desk hands the rollback to the attempts and kills."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from checkpoint_samples import FIELDS, writer

from engine.checkpoints.catalog import committed_tags, latest_tag
from engine.checkpoints.rollback_aside import set_aside_after
from engine.checkpoints.store import CheckpointStore, newest_verified_step
from engine.directives.directive import draft
from engine.directives.entry import Entry
from engine.domain import Verdict
from engine.events import DirectiveDecided, DirectiveProposed
from engine.rollback import RollbackOrder, read_order
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.rollback_restart import PendingRollback, RollbackDesk


def saved(directory: Path, *steps: int) -> None:
    store = CheckpointStore(directory, keep=10)
    for step in steps:
        store.save(step, writer(directory, step), dict(FIELDS, samples=step * 8), estimate_bytes=1000)


def test_newer_tags_are_kept_aside_and_a_resume_picks_the_tag(directory: Path) -> None:
    saved(directory, 20, 40, 60)
    assert set_aside_after(directory, "global_step20", "d-1") == ["global_step40", "global_step60"]
    assert committed_tags(directory) == [(20, "global_step20")] and latest_tag(directory) == "global_step20"
    assert sorted(p.name for p in (directory / "rolled_back" / "d-1").iterdir()) == [
        "global_step40",
        "global_step60",
    ]
    assert newest_verified_step(directory) == 20
    saved(directory, 40)  # the new branch saves the same step again: no collision
    assert committed_tags(directory) == [(20, "global_step20"), (40, "global_step40")]


class Attempts:
    def __init__(self) -> None:
        self.rollback: PendingRollback | None = None
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1


def test_the_desk_lists_verified_tags_and_performs_through_the_attempts(directory: Path) -> None:
    saved(directory, 20, 40)
    run = RunDir(directory.parent)
    attempts = Attempts()
    desk = RollbackDesk(run, journal=SimpleNamespace(watchers=[]), attempts=attempts)  # type: ignore[arg-type]
    assert desk.verified() == {"global_step20": 20, "global_step40": 40}
    directive = draft(
        {"rollback": {"tag": "global_step20", "skip_batches": 7}}, source="rules", step=47, ttl_s=60
    )
    verdict = Verdict(decision="allow", decision_id="x-1", policy_revision="r", directive_id=directive.id)
    desk.perform(Entry(directive, verdict, "approved"), 47)
    pending = attempts.rollback
    assert attempts.killed == 1 and pending is not None and pending.tag_step == 20
    assert pending.order == RollbackOrder(
        directive_id=directive.id, tag="global_step20", skip_batches=7, from_step=47
    )
    done = pending.apply()
    assert (done.steps_given_up, done.skip_batches, done.set_aside) == (27, 7, ["global_step40"])
    assert read_order(directory) == pending.order and latest_tag(directory) == "global_step20"


def test_a_pending_rollbacks_tag_is_kept_from_the_rotation_until_it_is_answered(directory: Path) -> None:
    """keep=2: without the pin, global_step20 would go with the save of step 60; an operator
    who answers three intervals later still finds the tag the rollback names."""
    run = RunDir(directory.parent)
    with Store(directory.parent / "store.sqlite") as store:
        journal = Journal(store, Consoles())
        RollbackDesk(run, journal, Attempts())  # type: ignore[arg-type]
        rotating = CheckpointStore(directory, keep=2)
        for step in (20, 40):
            rotating.save(step, writer(directory, step), dict(FIELDS, samples=step * 8), estimate_bytes=1000)
        directive = draft(
            {"rollback": {"tag": "global_step20", "skip_batches": 1}}, source="rules", step=41, ttl_s=600
        )
        verdict = Verdict(decision="allow", decision_id="x-2", policy_revision="r", directive_id=directive.id)
        entry = Entry(directive, verdict, "pending")
        journal.record(DirectiveProposed(directive=entry.view(), verdict=verdict))
        for step in (60, 80, 100):
            rotating.save(step, writer(directory, step), dict(FIELDS, samples=step * 8), estimate_bytes=1000)
        assert [s for s, _ in committed_tags(directory)] == [20, 80, 100]  # 40 and 60 rotated, 20 held

        entry.state = "rejected"
        journal.record(DirectiveDecided(directive=entry.view(), verdict=verdict))
        rotating.save(120, writer(directory, 120), dict(FIELDS, samples=120 * 8), estimate_bytes=1000)
        assert [s for s, _ in committed_tags(directory)] == [100, 120]  # answered: the pin is gone


def test_an_unreadable_pins_file_holds_nothing_back(directory: Path) -> None:
    from engine.checkpoints.pins import PINS_NAME, pinned_steps, write_pins

    write_pins(directory, {"global_step20": "why", "not-a-tag": "ignored"})
    assert pinned_steps(directory) == {20}
    (directory / PINS_NAME).write_text("{truncated")
    assert pinned_steps(directory) == set()
    write_pins(directory, {})
    assert not (directory / PINS_NAME).exists()
