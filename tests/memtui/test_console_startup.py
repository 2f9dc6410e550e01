"""A starting run: the console says what the trainer is doing before its first step (the
header with the phase's elapsed time, the memory panel's empty state), and `memtui status`
says it too. Against a scripted transport replaying phases as the supervisor records them."""

from __future__ import annotations

from typing import Any

import pytest

from engine.domain import RunStatus, StartupStatus
from engine.events import PhaseName, StartupPhase
from engine.run.directory import RunDir
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from memtui.console.widgets.memory_panel import MemoryPanel
from memtui.console.widgets.run_header import RunHeader, render_header
from memtui.status_report import render_status
from tests.fakes.run_script import T0, make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, welcome_for
from tests.memtui.console_harness import text_of
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)

LAUNCHED = [make_event(1, "run_started", "run started"), make_event(2, "trainer_launched", "attempt 1")]


def enter_phase(engine: ScriptedEngine, phase: PhaseName, **details: Any) -> None:
    """The trainer of attempt 1 enters a start-up phase, said as the supervisor records it."""
    payload = StartupPhase(phase=phase, attempt=1, **details)
    engine.add_event(payload, payload.label(), attempt=1)


@pytest.fixture
async def starting(live_run: RunDir):  # type: ignore[no-untyped-def]
    async with ScriptedEngine(
        live_run.socket, welcome_for(live_run.run_id, "starting"), events=LAUNCHED
    ) as engine:
        yield engine


async def test_the_phase_shows_before_the_first_step_and_goes_with_it(
    live_run: RunDir, starting: ScriptedEngine
) -> None:
    enter_phase(starting, "importing")  # before the console attaches: it comes by replay
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 32)):
        header = app.query_one(RunHeader)
        await until(lambda: "importing torch and DeepSpeed" in text_of(header), seen=lambda: text_of(header))
        memory = app.query_one(MemoryPanel)
        await until(lambda: "waiting for the first step: importing torch" in text_of(memory))

        enter_phase(starting, "building_op", op="deepspeed_shm_comm", cache="/tmp/ext/deepspeed_shm_comm")
        building = "building DeepSpeed op deepspeed_shm_comm (once per environment)"
        await until(lambda: building in text_of(header), seen=lambda: text_of(header))
        enter_phase(starting, "initialising")
        await until(lambda: "initialising DeepSpeed" in text_of(header), seen=lambda: text_of(header))

        starting.send_telemetry(make_sample(1))  # the first step: the start-up is over
        await until(lambda: app.view.step == 1 and app.view.startup_phase is None)
        await until(lambda: "⧗" not in text_of(header), seen=lambda: text_of(header))
        assert "initialising" not in text_of(memory)


def test_the_header_counts_the_phase_from_its_event() -> None:
    event = make_event(3, "startup_phase", data={"phase": "waiting_for_build", "attempt": 1, "op": "x_op"})
    view = RunView(run_id="r", state="starting").with_event(event)
    text = render_header(view, now=event.ts + 75)
    assert "⧗ 1m15s waiting for another process's build of x_op" in text


def test_a_phase_replayed_after_its_attempt_stepped_is_over() -> None:
    view = RunView(run_id="r", state="running").with_sample(make_sample(5, attempt=2))
    old = make_event(3, "startup_phase", data={"phase": "first_step", "attempt": 2}, attempt=2)
    assert view.with_event(old).startup_phase is None
    new = make_event(4, "startup_phase", data={"phase": "importing", "attempt": 3}, attempt=3)
    assert view.with_event(new).startup_phase is not None  # a restarted attempt's
    exited = make_event(5, "trainer_exited", data={"attempt": 3, "returncode": -9, "reason": "killed"})
    assert view.with_event(new).with_event(exited).startup_phase is None


def test_status_says_the_phase_and_for_how_long() -> None:
    startup = StartupStatus(phase="initialising", label="initialising DeepSpeed", since=T0, attempt=2)
    status = RunStatus(run_id="r", name="r", state="starting", run_dir="/tmp/r", startup=startup)
    assert "start-up     initialising DeepSpeed for 12s (attempt 2)" in render_status(status, now=T0 + 12)
