"""The console as a newcomer meets it, cell for cell (fixed data, fixed clock, the scripted
transport): the main screen starting (before the first step) and finished, at 80x24 and 160x48 (running
is ``test_console_snapshot.test_main_screen``); and at 80x24, the smallest size we promise,
every modal: the key list, the checkpoints, the alert list, a directive's details (160x48
too) and an event in full; and a run's read-only history view at both sizes.

Update after an intended change:
``pytest tests/memtui/test_console_snapshot_states.py --snapshot-update``, then look at the SVGs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.events import StartupPhase, StateChanged
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import Hardware
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from memtui.console.widgets.event_log import EventLog
from tests.fakes.run_script import make_event
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.memtui.test_cli_ending import checkpoint
from tests.memtui.test_console_snapshot import (
    CREATED_AT,
    LAST_STEP,
    NOW,
    figures_read,
    fixed_run,
    sample,
    scripted_events,
    until_drawn,
    utc,  # noqa: F401  (a fixture)
)
from tests.memtui.test_hardware_console import no_nvml
from tests.waiting import until

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
SMALL = (80, 24)


def empty_run(home: Path) -> RunDir:
    """A run just launched: its run.json, no step stored yet."""
    run = RunDir(home / "runs" / "demo-20231114-221320-ab12")
    run.ensure_layout()
    config = build_run_config(name="demo", steps=2000).model_dump(mode="json")
    run.config_file.write_text(json.dumps({"run_id": run.run_id, "created_at": CREATED_AT, "config": config}))
    with Store(run.store):
        pass  # the supervisor creates it at start
    return run


def live_console(run: RunDir) -> MemtuiApp:
    view = dataclasses.replace(stored_view(run), connection="connecting", newest_data_at=None)
    return MemtuiApp(run, view=view, clock=lambda: NOW)


@SIZES
def test_starting(home: Path, utc: None, snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Launched, the trainer not yet stepping: the start-up phase and its time in the header,
    no figures, and each panel says what it waits for."""
    run = empty_run(home)
    building = StartupPhase(phase="building_op", attempt=1, op="deepspeed_shm_comm")
    events = [
        make_event(1, "run_started", "run started: preset tiny, 2000 steps", ts=CREATED_AT + 1),
        make_event(2, "trainer_launched", "trainer attempt 1 started (pid 4242)", ts=CREATED_AT + 2),
        make_event(3, building, building.label(), ts=NOW - 42),
    ]

    async def started(pilot) -> None:  # type: ignore[no-untyped-def]
        await until_drawn(pilot, last_seq=3, step=0)

    with ScriptedEngine.in_thread(run.socket, welcome_for(run.run_id, "starting"), events=events):
        assert snap_compare(live_console(run), terminal_size=size, run_before=started)


@SIZES
def test_finished(home: Path, utc: None, snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Completed: final figures (at step N, ran, the run's average), no live rate, and no
    readings of the processes that are gone."""
    run = fixed_run(home)
    ended = StateChanged.model_validate({"from": "running", "to": "completed"})
    events = [*scripted_events(), make_event(6, ended, "completed at step 241", ts=NOW - 0.2)]
    stream = [Hardware(snapshot=no_nvml(ts=NOW - 1)), *telemetry([sample(LAST_STEP + 1)], "completed")]
    with ScriptedEngine.in_thread(
        run.socket, welcome_for(run.run_id, "completed"), events=events, stream=stream
    ):

        async def finished(pilot) -> None:  # type: ignore[no-untyped-def]
            await until(lambda: pilot.app.view.hardware is not None, what="the hardware reading")
            await until_drawn(pilot, last_seq=6)

        assert snap_compare(live_console(run), terminal_size=size, run_before=finished)


def history_console(run: RunDir, *, events: bool = True) -> MemtuiApp:
    view = stored_view(run)
    for event in scripted_events() if events else []:
        view = view.with_event(event)
    return MemtuiApp(run, live=False, view=view, clock=lambda: NOW)


def test_key_list(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """``?`` at 80x24: every key fits (in columns), and how to close the list shows."""
    app = history_console(fixed_run(home))
    assert snap_compare(app, terminal_size=SMALL, press=["question_mark"], run_before=figures_read)


def test_checkpoints(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """``C`` at 80x24 over three verified checkpoints (their ages fixed against the clock)."""
    run = fixed_run(home)
    for step in (100, 150, 200):
        checkpoint(run, step)
    for n, tag in enumerate(sorted(p for p in run.checkpoints.iterdir() if p.is_dir())):
        os.utime(tag, (NOW - 600 + n * 60, NOW - 600 + n * 60))
    app = history_console(run)

    async def listed(pilot) -> None:  # type: ignore[no-untyped-def]
        await figures_read(pilot)
        await pilot.press("C")
        await until(lambda: "verified" in str(pilot.app.screen.query_one("#checkpoint-list").visual))
        await pilot.pause()

    assert snap_compare(app, terminal_size=SMALL, run_before=listed)


def test_alert_list(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """``A`` at 80x24 (firing, reminded and resolved alerts)."""
    from tests.memtui.test_alerts_screen import T0, history

    run = fixed_run(home)
    view = stored_view(run)
    for event in history():
        view = view.with_event(event)
    app = MemtuiApp(run, live=False, view=view, clock=lambda: T0 + 600)
    assert snap_compare(app, terminal_size=SMALL, press=["A"], run_before=figures_read)


@SIZES
def test_directive_details(home: Path, utc: None, snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """enter on the pending directive: its fields, bounds and reasons, how to close (read-only
    here: no answer offered)."""
    app = history_console(fixed_run(home))
    assert snap_compare(app, terminal_size=size, press=["enter"], run_before=figures_read)


@SIZES
def test_history_view(home: Path, utc: None, snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """A run's history (not live): read-only in the header, no command in the footer."""
    app = history_console(fixed_run(home))
    assert snap_compare(app, terminal_size=size, run_before=figures_read)


def test_event_in_full(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """↑ on the events panel selects the newest event (a directive proposed); enter opens it
    whole: its message and every field of its data (scrolled, the close hint on the border)."""
    app = history_console(fixed_run(home))

    async def opened(pilot) -> None:  # type: ignore[no-untyped-def]
        await figures_read(pilot)
        pilot.app.query_one(EventLog).focus()
        await pilot.press("up", "enter")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SMALL, run_before=opened)


def test_routine_events_folded(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """An auto-cadence demo's events at 80x24: the saves, the cadence change and the spare
    fold into one line under the chaos injection, which they no longer push out."""
    from tests.memtui.test_console_readability import demo_events

    run = fixed_run(home)
    events = demo_events()
    stream = telemetry([sample(LAST_STEP + 1)])
    with ScriptedEngine.in_thread(run.socket, welcome_for(run.run_id), events=events, stream=stream):

        async def drawn(pilot) -> None:  # type: ignore[no-untyped-def]
            await until_drawn(pilot, last_seq=len(events))

        assert snap_compare(live_console(run), terminal_size=SMALL, run_before=drawn)
