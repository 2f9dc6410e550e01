"""A hung trainer is recovered, a stop that cannot save says so, and the restart budget
counts progress: the hang clock alone (pure), then the supervisor with the fake trainer."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.config.run_config import RestartConfig
from engine.run.directory import RunDir
from engine.run.reports.status import offline_status, save_report
from engine.run.storage.store import Store
from engine.supervisor.hangs.hang_clock import HANG_FLOOR_S, HANG_STEP_FACTOR, HangClock
from engine.supervisor.trainers.restart_policy import AttemptEnd, decide
from memtui.cli.runs.ending_report import exit_code

pytestmark = pytest.mark.timeout(180)  # each wait ends when its condition holds


def events_of(run: RunDir, type_: str) -> list[Any]:
    with Store(run.store, readonly=True) as store:
        return [e for e in store.events_since(0) if e.type == type_]


# ------------------------------------------------------------------- the clock (pure)


def test_a_configured_limit_is_the_limit() -> None:
    clock = HangClock(5.0)
    clock.sign_of_life(100.0)
    assert not clock.hung(104.9)
    assert clock.hung(105.0) and clock.quiet_s(105.0) == 5.0


def test_the_derived_limit_follows_the_pace_above_its_floor() -> None:
    clock = HangClock(None)
    assert clock.limit_s() == HANG_FLOOR_S  # no step yet: the floor
    for i in range(10):
        clock.on_step(i * 0.1)  # 0.1 s steps: 20 of them is far under the floor
    assert clock.limit_s() == HANG_FLOOR_S
    slow = HangClock(None)
    for i in range(10):
        slow.on_step(i * 60.0)  # a minute a step
    assert slow.limit_s() == HANG_STEP_FACTOR * 60.0
    assert not slow.hung(9 * 60.0 + HANG_FLOOR_S)  # past the floor, not past 20 steps
    assert slow.hung(9 * 60.0 + HANG_STEP_FACTOR * 60.0)


def test_a_start_up_phase_restarts_the_quiet_time_and_nothing_is_watched_before_a_launch() -> None:
    clock = HangClock(10.0)
    assert clock.quiet_s(1000.0) is None and not clock.hung(1000.0)
    clock.sign_of_life(0.0)
    clock.sign_of_life(8.0)  # e.g. building_op
    assert not clock.hung(15.0)
    assert clock.hung(18.0)


def test_an_op_build_is_never_judged_by_a_hang_s_shorter_than_the_floor() -> None:
    """A compiler works for minutes with the trainer silent: restart.hang_s = 60 would kill
    every cold build and turn it into a restart loop. Past the build, hang_s holds again."""
    clock = HangClock(60.0)
    clock.sign_of_life(0.0, "building_op")
    assert not clock.hung(HANG_FLOOR_S - 1) and clock.hung(HANG_FLOOR_S)  # a build silent for ever is hung
    clock.sign_of_life(0.0, "waiting_for_build")
    assert not clock.hung(120.0)
    clock.sign_of_life(200.0, "initialising")
    assert clock.hung(260.0)
    clock.sign_of_life(300.0, "building_op")
    clock.on_step(310.0)  # a step ends the build's allowance
    assert clock.hung(370.0)


# ----------------------------------------------------------- the restart budget (pure)


def test_the_restart_limit_is_named_when_it_ends_the_run() -> None:
    config = RestartConfig(max_restarts=2)
    killed = AttemptEnd(returncode=-signal.SIGKILL)
    decision = decide(killed, 2, False, config)
    assert decision.action == "end" and decision.streak == 3
    limit = decision.limit_reached(config)
    assert limit is not None and "restart.max_restarts = 2" in limit and "2 restarts in a row" in limit
    assert decide(killed, 2, True, config).action == "restart"  # progress resets the streak
    assert decide(killed, 0, False, config).limit_reached(config) is None


def test_a_hang_is_the_cause_of_the_restart() -> None:
    hung = AttemptEnd(returncode=-signal.SIGKILL, hung="hung: no sign of life for 612 s")
    decision = decide(hung, 0, False, RestartConfig())
    assert decision.action == "restart" and decision.cause.startswith("hung: no sign of life")


# ------------------------------------------------------------- the supervisor, for real


@pytest.mark.slow
async def test_a_stopped_trainer_is_restarted_after_hang_s_with_its_stacks_kept(
    run: RunDir, start, fake_env, wait_until
) -> None:
    run.write_config(build_run_config(steps=100000, restart={"hang_s": 2.0}))
    running = await start()
    attempts = running.supervisor.attempts
    await wait_until(lambda: (running.supervisor.latest or None) and attempts.pid, "the first step")
    first = attempts.pid
    os.kill(first, signal.SIGSTOP)  # a deadlock's stand-in: alive, silent
    await wait_until(lambda: events_of(run, "trainer_hung"), "the hang recorded", timeout=60)
    await wait_until(
        lambda: attempts.attempt == 2 and running.supervisor.latest.attempt == 2, "a step of attempt 2"
    )
    hung = events_of(run, "trainer_hung")[0]
    assert hung.attempt == 1 and hung.data["quiet_s"] >= 2.0 and hung.data["stacks_log"] == "stacks"
    assert hung.data["stacks_dumped"] == 1
    (collected,) = [e for e in events_of(run, "stacks_collected") if e.data["rule"] == "trainer_hung"]
    assert collected.data["stopped"] == [0]
    dump = (run.path / collected.data["files"]["0"]).read_text()
    assert "most recent call first" in dump and "fake_trainer.py" in dump  # its own Python stack
    # where it stood: a frame of that stack (the fake trainer's loop, or the engine code it
    # was in when SIGSTOP landed, e.g. parsing a message)
    where = collected.data["where"]["0"]
    assert where.split(":")[0].startswith(("tests/fakes/", "engine/")) and where.split(":")[0] in dump
    restarted = events_of(run, "trainer_restarted")[0]
    assert restarted.data["cause"].startswith("hung: no sign of life")
    running.supervisor.request_stop("test")
    assert await running.result(timeout=60) == 0


@pytest.mark.slow
async def test_a_paused_run_is_never_taken_for_hung(run: RunDir, start, fake_env, wait_until) -> None:
    run.write_config(build_run_config(steps=100000, restart={"hang_s": 1.0}))
    running = await start()
    supervisor = running.supervisor
    await wait_until(lambda: supervisor.latest, "the first step")
    supervisor.request_pause(True, "test", "p1")
    await wait_until(lambda: supervisor.state == "paused", "the hold")
    paused_at = supervisor.latest.step
    hangs = supervisor._hangs
    assert hangs is not None and not hangs.watching()
    looked = hangs.ticks
    # the watch looks three times while held, each time longer after the last step than hang_s
    await wait_until(lambda: hangs.ticks >= looked + 3, "three looks of the hang watch")
    supervisor.request_pause(False, "test", "p2")
    await wait_until(lambda: supervisor.latest.step > paused_at, "a step after the pause")
    assert not events_of(run, "trainer_hung") and supervisor.attempts.attempt == 1
    supervisor.request_stop("test")
    assert await running.result(timeout=60) == 0


@pytest.mark.slow
async def test_a_stop_whose_trainer_cannot_save_says_the_final_save_was_missed(
    run: RunDir, start, fake_env, wait_until
) -> None:
    running = await start(stop_grace_s=0.5)
    supervisor = running.supervisor
    await wait_until(lambda: supervisor.latest and supervisor.attempts.pid, "the first step")
    os.kill(supervisor.attempts.pid, signal.SIGSTOP)
    supervisor.request_stop("operator")
    assert await running.result(timeout=60) == 0
    missed = events_of(run, "final_save_missed")
    assert len(missed) == 1 and "was killed" in missed[0].data["reason"]
    with Store(run.store, readonly=True) as store:
        report = save_report(store)
        meta = store.read_meta()
    assert report is not None and report.outcome == "failed"
    assert meta.state == "stopped"
    assert exit_code(offline_status(run)) == 1


@pytest.mark.slow
async def test_restarts_that_make_progress_go_on_past_max_restarts(
    run: RunDir, start, fake_env, wait_until
) -> None:
    # each attempt trains 3 new steps then fails; no checkpoint is ever written
    fake_env(exit_code=1, steps=3, advance=3)
    run.write_config(build_run_config(steps=100000, restart={"max_restarts": 1, "backoff_initial_s": 0.0}))
    running = await start()
    attempts = running.supervisor.attempts
    await wait_until(lambda: attempts.restarts >= 3, "three restarts", timeout=90)
    assert not events_of(run, "restarts_exhausted")
    running.supervisor.request_stop("test")
    assert await running.result(timeout=60) == 0


@pytest.mark.slow
async def test_restarts_without_progress_end_the_run_naming_the_limit(
    run: RunDir, start, fake_env, wait_until
) -> None:
    fake_env(exit_code=1, steps=3)  # every attempt the same 3 steps, then a failure
    run.write_config(build_run_config(steps=100000, restart={"max_restarts": 1, "backoff_initial_s": 0.0}))
    running = await start()
    assert await running.result(timeout=90) == 0
    with Store(run.store, readonly=True) as store:
        meta = store.read_meta()
    assert meta.state == "failed"
    assert (
        "restart limit reached" in (meta.exit_reason or "") and "restart.max_restarts = 1" in meta.exit_reason
    )
    assert events_of(run, "restarts_exhausted")[0].data["limit"].startswith("restart limit reached")
