from __future__ import annotations

import math

import pytest

from engine.wire.protocol import EventMessage, Ok, Telemetry, Welcome
from memtui.console.run_view import MAX_EVENTS, RunView
from tests.fakes.run_script import make_event, make_sample


def telemetry(step: int, state: str = "running", **over: object) -> Telemetry:
    return Telemetry(sample=make_sample(step, **over), state=state)


def test_telemetry_sets_numbers_state_and_freshness() -> None:
    view = RunView(target_steps=100).apply(telemetry(10), now=5.0)
    assert view.step == 10 and view.state == "running" and view.newest_data_at == 5.0
    assert view.loss_smoothed == pytest.approx(5.4)
    assert view.progress == pytest.approx(0.1)


def test_smoothing_averages_and_eta() -> None:
    view = RunView(target_steps=100)
    for step in range(1, 11):
        view = view.apply(telemetry(step), now=float(step))
    s = view.sample
    assert s is not None
    assert view.loss_smoothed is not None and s.loss < view.loss_smoothed < 5.49  # lags the falling loss
    assert view.seconds_per_step == pytest.approx(0.05)
    assert view.eta_s() == pytest.approx(90 * 0.05)
    assert view.tokens_per_s_avg == pytest.approx(1024 / 0.05)


def test_time_held_in_a_pause_counts_in_neither_pace_nor_eta() -> None:
    view = RunView(target_steps=100)
    for step in range(1, 11):
        view = view.apply(telemetry(step), now=float(step))
    view = view.apply(EventMessage(event=make_event(1, "run_continued")), now=20.0)
    late = 1_700_000_000.0 + 10 * 0.05 + 600  # ten minutes held at step 10
    for step in range(11, 21):
        view = view.apply(telemetry(step, ts=late + (step - 11) * 0.05), now=30.0)
    assert view.seconds_per_step == pytest.approx(0.05)  # not (600 s + 1 s) / 19 steps
    assert view.eta_s() == pytest.approx(80 * 0.05)


def test_nan_loss_does_not_poison_the_trend() -> None:
    view = RunView().apply(telemetry(1), 0).apply(telemetry(2, loss=math.nan), 0)
    assert math.isnan(view.sample.loss)  # type: ignore[union-attr]
    assert view.loss_smoothed == pytest.approx(5.49)


def test_stale_samples_are_ignored_but_a_new_attempt_is_not() -> None:
    view = RunView().apply(telemetry(5), 0)
    assert view.apply(telemetry(4), 1) is not view  # state may still change...
    assert view.apply(telemetry(4), 1).step == 5  # ...but an older step never wins
    resumed = view.apply(telemetry(3, attempt=2), 2)
    assert resumed.step == 3 and resumed.window_start is resumed.sample


def test_loss_scale_lowest_is_kept() -> None:
    view = RunView()
    for step, scale in [(1, 4096.0), (2, 1024.0), (3, 2048.0)]:
        view = view.apply(telemetry(step, loss_scale=scale), 0)
    assert view.loss_scale_min == 1024.0


def test_events_fold_in_order_without_duplicates_and_change_state() -> None:
    view = RunView(state="running")
    for seq in (1, 2, 2, 1, 3):
        view = view.apply(EventMessage(event=make_event(seq)), now=0)
    assert [e.seq for e in view.events] == [1, 2, 3] and view.last_seq == 3
    view = view.apply(
        EventMessage(event=make_event(4, "state_changed", data={"from": "running", "to": "stopping"})), 0
    )
    assert view.state == "stopping"
    view = view.apply(
        EventMessage(event=make_event(5, "state_changed", data={"from": "stopping", "to": "bogus"})), 0
    )
    assert view.state == "stopping"


def test_event_log_is_bounded() -> None:
    view = RunView()
    for seq in range(1, MAX_EVENTS + 20):
        view = view.with_event(make_event(seq))
    assert len(view.events) == MAX_EVENTS and view.events[-1].seq == MAX_EVENTS + 19


def test_welcome_connection_and_unrelated_messages() -> None:
    view = RunView().apply(Welcome(run_id="r1", state="paused", last_seq=0), 0)
    assert (view.run_id, view.state) == ("r1", "paused")
    assert view.with_connection("disconnected").connection == "disconnected"
    assert view.apply(Ok(id="x"), 0) is view


def test_times_and_ended_runs() -> None:
    view = RunView(started_at=100.0, target_steps=10).apply(telemetry(5), now=130.0)
    assert view.elapsed_s(160.0) == 60.0 and view.data_age_s(131.5) == 1.5
    assert RunView().elapsed_s(1.0) is None and RunView().data_age_s(1.0) is None
    done = view.apply(telemetry(6, state="completed"), 0)
    assert done.finished and done.eta_s() is None


def test_folds_adaptation_restart_and_checkpoint_events() -> None:
    adapted = make_event(1, "memory_adapted", data={"from_micro_batch": 16, "to_micro_batch": 8})
    restarted = make_event(2, "trainer_restarted", data={"cause": "killed", "resume_step": 40, "restarts": 1})
    saved = make_event(3, "checkpoint_saved")
    view = RunView()
    for event in (adapted, restarted, saved, make_event(4, "note")):
        view = view.apply(EventMessage(event=event), now=1.0)
    assert view.last_adaptation == adapted and view.last_restart == restarted
    assert view.restarts == 1 and view.checkpoint_seq == 3
