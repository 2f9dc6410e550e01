"""A full disk under a live supervisor with the fake trainer: the store's file is made full
for real (``PRAGMA max_page_count`` on the supervisor's own connection: SQLite then refuses
every write that needs a page with SQLITE_FULL, "database or disk is full", as on a full
disk), and room is given back by raising the limit. And once from the operating system:
a detached supervisor under a file-size limit (``ulimit -f``: its writes past the limit
fail with EFBIG), lifted from outside with ``prlimit``."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.events import STORAGE_RULE, AlertRaised, RunEnded, TrainerFinished
from engine.run.directory import RunDir
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store
from engine.supervisor import storage_outage
from engine.wire.protocol import Pause, Status, Stop
from tests.fakes import fake_trainer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries while the test waits (s); the detached supervisor below keeps the defaults."""
    monkeypatch.setattr(storage_outage, "RETRY_FIRST_S", 0.05)
    monkeypatch.setattr(storage_outage, "RETRY_MOST_S", 0.2)


def fill_the_disk(store: Store) -> None:
    """Not one page more for the store's file."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")


def make_room(store: Store) -> None:
    store._db.execute("PRAGMA max_page_count = 1073741823")


def storage_alert(state: str) -> Any:
    def matches(m: Any) -> bool:
        alert = AlertRaised.of(m.event) if m.kind == "event" else None
        return alert is not None and alert.rule == STORAGE_RULE and alert.state == state

    return matches


def event(type_: str) -> Any:
    return lambda m: m.kind == "event" and m.event.type == type_


class Seen:
    """Every event a console read, by seq."""

    def __init__(self) -> None:
        self.events: dict[int, Any] = {}

    def take(self, found: tuple[Any, list[Any]]) -> Any:
        message, before = found
        for m in [*before, message]:
            if m.kind == "event":
                self.events[m.event.seq] = m.event
        return message


def status_of(answer: Any) -> dict[str, Any]:
    assert answer.kind == "ok", answer
    return dict(answer.result)


def stored_record(run: RunDir) -> tuple[Any, list[Any], list[Any]]:
    with Store(run.store, readonly=True) as store:
        return store.read_meta(), store.events_since(0), store.steps()


@pytest.mark.slow
async def test_a_full_disk_holds_training_and_the_run_goes_on_by_itself_when_room_returns(
    run: RunDir, start, connect, fake_env, wait_until
) -> None:
    run.write_config(build_run_config({}, steps=100))
    running = await start()
    store = running.supervisor.store
    console, seen = await connect(replay_from=0), Seen()
    seen.take(await console.until(lambda m: m.kind == "telemetry" and m.sample.step >= 20))

    fill_the_disk(store)
    firing = seen.take(await console.until(storage_alert("firing"), what="the storage alert"))
    assert firing.event.severity == "critical" and "database or disk is full" in firing.event.message
    # It reached the console although the store could not take it: it waits, numbered.
    assert store.fault is not None and firing.event.seq in [e.seq for e in store.held.events]
    assert store.held.steps, "the steps whose write was refused wait in memory"
    paused = seen.take(await console.until(event("run_paused"), what="training held"))
    held_at = paused.event.data["step"]

    status = status_of(seen.take(await console.answer(Status(id="st"))))
    assert status["state"] == "paused" and status["held_by"].startswith("storage: database or disk is full")
    refused = seen.take(await console.answer(Pause(id="go", paused=False)))
    assert refused.kind == "error" and "goes on by itself" in refused.reason
    late = await connect(replay_from=0)  # a console that comes meanwhile replays what waits
    replayed, _ = await late.until(storage_alert("firing"))
    assert replayed.event == firing.event

    make_room(store)
    resolved = seen.take(await console.until(storage_alert("resolved"), what="the store writes again"))
    assert "nothing was lost" in resolved.event.message
    seen.take(await console.until(event("run_continued")))
    seen.take(await console.until(lambda m: m.kind == "telemetry" and m.sample.step > held_at + 20))
    seen.take(await console.answer(Stop(id="stop")))
    seen.take(await console.until(event("run_ended")))
    assert await running.result() == 0

    meta, events, steps = stored_record(run)
    finished = [p for p in map(TrainerFinished.of, events) if p is not None][-1]
    # Every step the fake trainer sent, once, in order: none lost, none written twice.
    assert [s.step for s in steps if s.attempt == 1] == list(range(1, finished.step + 1))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # What a console was told under a seq is what the store holds under it.
    assert {e.seq: e for e in events if e.seq in seen.events} == seen.events
    assert meta.state == "stopped"


@pytest.mark.slow
async def test_an_operators_pause_outlasts_the_storage_hold(run: RunDir, start, connect, fake_env) -> None:
    run.write_config(build_run_config({}, steps=100))
    running = await start()
    store = running.supervisor.store
    console = await connect()
    await console.until(lambda m: m.kind == "telemetry" and m.sample.step >= 5)
    fill_the_disk(store)
    await console.until(event("run_paused"))
    ok, _ = await console.answer(Pause(id="p", paused=True))  # the operator pauses too
    assert ok.kind == "ok"
    make_room(store)
    await console.until(storage_alert("resolved"))
    continued, _ = await console.until(event("continue_requested"))
    assert continued.event.data["cause"] == "storage" and "operator's pause stays" in continued.event.message
    status = status_of((await console.answer(Status(id="s")))[0])
    assert status["state"] == "paused" and status["held_by"] == "operator"
    ok, _ = await console.answer(Pause(id="u", paused=False))
    assert ok.kind == "ok"
    await console.until(event("run_continued"))
    await console.answer(Stop(id="stop"))
    assert await running.result() == 0


@pytest.mark.slow
async def test_a_disk_that_stays_full_ends_the_run_as_failed_and_the_ending_is_stored_when_it_can(
    run: RunDir, start, connect, fake_env
) -> None:
    run.write_config(build_run_config({"storage": {"give_up_s": 0.5}}, steps=100))
    running = await start()
    store = running.supervisor.store
    console = await connect()
    await console.until(lambda m: m.kind == "telemetry" and m.sample.step >= 5)
    fill_the_disk(store)
    await console.until(event("stop_requested"), what="the supervisor giving up")
    finished, _ = await console.until(event("trainer_finished"))
    assert finished.event.data["reason"] == "stopped"  # a clean stop: its final checkpoint
    ended, _ = await console.until(event("run_ended"))
    assert RunEnded.of(ended.event) == RunEnded(state="failed", reason=ended.event.data["reason"])
    assert "the run's store could not write" in ended.event.data["reason"]
    assert store.fault is not None  # nothing of the ending is stored yet
    make_room(store)  # the supervisor still retries: the ending is stored now
    assert await running.result() == 0
    meta, events, _ = stored_record(run)
    assert meta.state == "failed" and "could not write" in (meta.exit_reason or "")
    assert {e.seq: e for e in events}[ended.event.seq] == ended.event  # as the console saw it
    closing = AlertRaised.of(events[-1])
    assert closing is not None and (closing.rule, closing.state) == (STORAGE_RULE, "resolved")
    assert offline_status(run).state == "failed"


@pytest.mark.deepspeed
@pytest.mark.timeout(300)
async def test_the_real_trainer_holds_on_a_full_disk_and_goes_on_when_room_returns(
    run: RunDir, start, connect
) -> None:
    raw = {"checkpoint": {"every_steps": 0}, "train": {"warmup_steps": 5}}
    run.write_config(build_run_config(raw, steps=100_000))
    running = await start(trainer_cmd=[sys.executable, "-m", "engine.trainer"])
    store = running.supervisor.store
    console = await connect()
    await console.until(lambda m: m.kind == "telemetry" and m.sample.step >= 10, timeout=240)
    fill_the_disk(store)
    await console.until(storage_alert("firing"))
    paused, _ = await console.until(event("run_paused"), what="the real trainer holding")
    held_at = paused.event.data["step"]
    make_room(store)
    await console.until(storage_alert("resolved"))
    await console.until(event("run_continued"))
    await console.until(lambda m: m.kind == "telemetry" and m.sample.step > held_at + 10, timeout=120)
    await console.answer(Stop(id="stop"))
    assert await running.result(timeout=120) == 0
    meta, events, steps = stored_record(run)
    finished = [p for p in map(TrainerFinished.of, events) if p is not None][-1]
    assert finished.reason == "stopped" and meta.state == "stopped"
    assert [s.step for s in steps if s.attempt == 1] == list(range(1, finished.step + 1))


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs Linux's prlimit")
def test_a_real_file_size_limit_holds_a_detached_supervisor_until_it_is_lifted(home) -> None:
    run = RunDir.create(build_run_config({}, steps=100), home=home)
    env = dict(
        os.environ,
        MEMTUI_TRAINER_CMD=f"{sys.executable} {fake_trainer.__file__}",
        FAKE_TRAINER_RATE_HZ="200",
        FAKE_TRAINER_STEPS="1500",
        PYTHONUNBUFFERED="1",
    )
    # 256 KiB per file: the store's WAL outgrows it within seconds, and SQLite's write gets
    # EFBIG (Python ignores SIGXFSZ); supervisor.log stays well below it.
    command = 'ulimit -S -f 256 && exec "$0" -m engine supervise "$1"'
    with open(run.supervisor_log, "ab") as log:
        proc = subprocess.Popen(
            ["bash", "-c", command, sys.executable, str(run.path)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: " run_paused " in run.supervisor_log.read_text(), what="training held")
        assert "cannot write (disk I/O error" in run.supervisor_log.read_text()
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert offline_status(run).state == "completed"
    _, events, steps = stored_record(run)
    assert [s.step for s in steps] == list(range(1, 1501))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    storage = [a.state for a in map(AlertRaised.of, events) if a is not None and a.rule == STORAGE_RULE]
    assert storage == ["firing", "resolved"]
