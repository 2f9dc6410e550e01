"""The header's restart count holds every time the trainer was started again, across
supervisor lives: a whole-tree kill (supervisor and trainer) brought back by ``memtui resume``
is a restart too, and the older restart's cost is no longer shown as the newest one's."""

from __future__ import annotations

from textual.content import Content

from engine.events import RunStarted, TrainerRestarted, TrainerResumed
from memtui.console.run_view import RunView
from memtui.console.widgets.run_header import render_header
from tests.fakes.run_script import make_event


def plain(markup: str) -> str:
    return Content.from_markup(markup).plain


def restart_then_whole_tree_kill() -> list:  # type: ignore[type-arg]
    restarted = TrainerRestarted(
        cause="killed by SIGKILL", returncode=-9, last_step=52, candidate_step=40, delay_s=1.0,
        restarts=1, streak=1, next_attempt=2,
    )  # fmt: skip
    resumed = TrainerResumed(attempt=2, resume_step=40, last_step=52, steps_lost=12, candidate_step=40)
    # supervisor and trainer SIGKILLed while running; memtui resume starts a new supervisor
    back = RunStarted(supervisor_pid=99, run_dir="/r", previous_state="running")
    return [make_event(7, restarted, attempt=1), make_event(8, resumed, attempt=2), make_event(9, back)]


def test_a_whole_tree_kill_then_resume_counts_as_a_restart() -> None:
    view = RunView(run_id="r", state="running")
    for event in restart_then_whole_tree_kill()[:2]:
        view = view.with_event(event)
    assert "↻ 1 restart, resumed at step 40, 12 steps lost" in plain(render_header(view, 0.0))
    view = view.with_event(restart_then_whole_tree_kill()[2])
    header = plain(render_header(view, 0.0))
    assert "↻ 2 restarts, 1 after the whole tree died" in header and "12 steps lost" not in header


def test_a_resume_after_an_ending_is_not_a_restart() -> None:
    ended_then_resumed = RunStarted(supervisor_pid=99, run_dir="/r", previous_state="stopped")
    view = RunView(run_id="r", state="running").with_event(make_event(3, ended_then_resumed))
    assert "↻" not in plain(render_header(view, 0.0))
