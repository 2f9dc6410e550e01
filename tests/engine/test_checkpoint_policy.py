"""Pure checkpoint and restart decisions: no torch, no disk."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from engine.checkpoints.manifest import Verdict
from engine.checkpoints.selection import plan_resume, save_due, select_newest_verified, space_needed, to_prune
from engine.config.run_config import RestartConfig
from engine.domain import EXIT_NO_CHECKPOINT
from engine.supervisor.trainers.restart_policy import AttemptEnd, backoff_s, decide


def verdict(step: int, problem: str | None = None) -> Verdict:
    return Verdict(f"global_step{step}", step, Path(f"/x/global_step{step}"), problem)


def test_cadence_by_steps_and_minutes() -> None:
    assert save_due(10, 0, 1.0, every_steps=10, every_minutes=0)
    assert not save_due(11, 10, 1.0, every_steps=10, every_minutes=0)
    assert save_due(11, 10, 61.0, every_steps=10, every_minutes=1.0)
    assert not save_due(10, 10, 999.0, every_steps=10, every_minutes=1.0)  # never twice per step
    assert not save_due(7, 0, 999.0, every_steps=0, every_minutes=0)


def test_prune_keeps_newest_k_milestones_and_the_new_one() -> None:
    assert to_prune([10, 20, 30, 40, 50], keep=2, milestone_every=0, newest=50) == [10, 20, 30]
    assert to_prune([10, 20, 30, 40, 50], keep=2, milestone_every=20, newest=50) == [10, 30]
    # An older run's higher tags never push out the one just written.
    assert 20 not in to_prune([10, 20, 30, 40], keep=1, milestone_every=0, newest=20)


@given(st.sets(st.integers(0, 10_000), min_size=1, max_size=40), st.integers(1, 10), st.integers(0, 50))
def test_prune_never_deletes_what_it_must_keep(steps: set[int], keep: int, milestone: int) -> None:
    newest = max(steps)
    doomed = set(to_prune(steps, keep, milestone, newest))
    assert newest not in doomed and doomed <= steps
    assert not doomed & set(sorted(steps, reverse=True)[:keep])
    if milestone:
        assert all(s % milestone for s in doomed)


def test_space_needed_has_headroom_and_reserve() -> None:
    assert space_needed(1000, 0) == 1250
    assert space_needed(1000, 100) == 1350


def test_selection_takes_the_newest_that_verifies_and_reads_no_further() -> None:
    read: list[int] = []

    def lazily():
        for v in [verdict(30, "checksum mismatch in a.pt"), verdict(20), verdict(10)]:
            read.append(v.step)
            yield v

    selection = select_newest_verified(lazily())
    assert selection.chosen is not None and selection.chosen.step == 20
    assert [v.step for v in selection.rejected] == [30]
    assert read == [30, 20]


def test_plan_resume_refuses_a_silent_fresh_start() -> None:
    bad = select_newest_verified(
        [verdict(20, "missing file x"), verdict(10, "half-written: no manifest.json")]
    )
    refused = plan_resume(bad, committed_before=True, allow_fresh=False)
    assert refused.action == "refuse"
    assert "global_step20: missing file x" in refused.reason and "--fresh" in refused.reason
    assert plan_resume(bad, committed_before=True, allow_fresh=True).action == "fresh"
    assert (
        plan_resume(select_newest_verified([]), committed_before=False, allow_fresh=False).action == "fresh"
    )
    good = plan_resume(select_newest_verified([verdict(20, "x"), verdict(10)]), True, False)
    assert good.action == "resume" and good.chosen is not None and good.chosen.step == 10


# ----------------------------------------------------------------------- restarts

CONFIG = RestartConfig(max_restarts=3, backoff_initial_s=0.5, backoff_max_s=3.0)


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_s(n, CONFIG) for n in (1, 2, 3, 4, 5, 6)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_killed_trainer_is_restarted_and_a_streak_without_checkpoints_ends() -> None:
    killed = AttemptEnd(returncode=-9)
    first = decide(killed, 0, progressed=False, config=CONFIG)
    assert first.action == "restart" and first.cause == "killed by SIGKILL" and first.delay_s == 0.0
    streak = first.streak
    for _ in range(2):
        streak = decide(killed, streak, False, CONFIG).streak
    assert streak == 3
    assert decide(killed, streak, False, CONFIG).action == "end"
    # A new checkpoint resets the streak and the backoff.
    again = decide(killed, streak, True, CONFIG)
    assert again.action == "restart" and again.streak == 1 and again.delay_s == 0.0


def test_endings_that_are_never_restarted() -> None:
    assert decide(AttemptEnd(-9, stop_requested=True), 0, False, CONFIG).action == "end"
    assert decide(AttemptEnd(0, finished_reason="completed"), 0, False, CONFIG).action == "end"
    assert decide(AttemptEnd(EXIT_NO_CHECKPOINT), 0, False, CONFIG).action == "end"
    assert decide(AttemptEnd(1, restartable=False), 0, False, CONFIG).action == "end"
    assert decide(AttemptEnd(None, launch_error="no such file"), 0, False, CONFIG).action == "end"
    assert decide(AttemptEnd(1), 0, False, RestartConfig(max_restarts=0)).action == "end"
    stopped_itself = AttemptEnd(0, finished_reason="stopped")
    assert decide(stopped_itself, 0, False, CONFIG).action == "end"
    preempted = decide(stopped_itself, 0, False, CONFIG.model_copy(update={"on_preemption": True}))
    assert preempted.action == "restart" and "preempted" in preempted.cause
