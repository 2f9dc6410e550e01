"""The console (Pilot) against a scripted engine transport: no torch, no supervisor."""

from __future__ import annotations

import pytest

from engine.run.directory import RunDir
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from memtui.console.screens.keys_screen import KeysScreen
from memtui.console.widgets.event_log import EventLog
from memtui.console.widgets.memory_panel import MemoryPanel
from memtui.console.widgets.numerics_panel import NumericsPanel
from memtui.console.widgets.run_header import RunHeader
from memtui.console.widgets.throughput_panel import ThroughputPanel
from tests.fakes.run_script import make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.memtui.console_harness import text_of
from tests.waiting import until


@pytest.fixture
async def fake(live_run: RunDir):  # type: ignore[no-untyped-def]
    samples = [
        make_sample(step, loss_scale=4096.0 / (2 if step == 3 else 1), overflow_count=1 if step >= 3 else 0)
        for step in range(1, 6)
    ]
    events = [
        make_event(1, "run_started", "run started"),
        make_event(2, "trainer_started", "trainer attempt 1"),
    ]
    welcome = welcome_for(live_run.run_id)
    async with ScriptedEngine(live_run.socket, welcome, events=events, stream=telemetry(samples)) as engine:
        yield engine


async def test_shows_step_loss_memory_and_events(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(100, 30)):
        await until(lambda: app.view.step == 5 and app.view.last_seq == 2)
        # drawn: the header and every panel take the same view in one redraw
        await until(lambda: "step 5/100" in text_of(app.query_one(RunHeader)))
        numerics = text_of(app.query_one(NumericsPanel))
        assert "5.45" in numerics
        assert "20.5k tok/s" in text_of(app.query_one(ThroughputPanel))
        memory = app.query_one(MemoryPanel)
        assert "process RSS (CPU stand-in)" in str(memory.border_title)
        assert "300 MiB" in text_of(memory) and "not VRAM" in text_of(memory)
        assert "4096 (2^12)" in numerics and "2048 (2^11)" in numerics and "overflows 1" in numerics
        header = text_of(app.query_one(RunHeader))
        assert live_run.run_id in header and "running" in header and "live" in header
        assert "step 5/100" in header
        events = text_of(app.query_one(EventLog))
        assert "run started" in events and "trainer attempt 1" in events

        fake.add_event("checkpoint_saved", "checkpoint step 5")
        await until(lambda: "checkpoint step 5" in text_of(app.query_one(EventLog)))
    assert fake.hellos[0].role == "console" and fake.hellos[0].replay_from == 0


async def test_q_detaches_without_sending_stop(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test() as pilot:
        await until(lambda: app.view.connection == "connected")
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 and app.sent == []  # the console sent no request at all
    await until(lambda: fake.clients == 0)  # the engine read the connection to its end ...
    assert not any(m.kind == "stop" for m in fake.requests)  # ... and no Stop in it


async def test_question_mark_lists_the_keys(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test() as pilot:
        await until(lambda: app.view.step == 5)  # the scripted stream is over
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, KeysScreen)
        fake.send_telemetry(make_sample(6))  # redraws go on underneath the keys box
        await until(lambda: "step 6/100" in text_of(app.query_one(RunHeader)))
        assert isinstance(app.screen, KeysScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, KeysScreen)
        assert app.is_running  # closing the keys box does not detach


async def test_reconnect_shows_disconnected_then_back_fills(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test():
        await until(lambda: app.view.last_seq == 2)
        assert app.client is not None
        app.client._backoff = (0.05, 0.1)
        await fake.drop_connections()
        await until(lambda: app.view.connection != "connected")
        fake.add_event("note", "while you were away")
        await until(lambda: app.view.connection == "connected" and app.view.last_seq == 3)
        await until(lambda: "while you were away" in text_of(app.query_one(EventLog)))
    assert fake.hellos[-1].replay_from == 2


async def test_finished_run_opens_read_only_on_its_history(run_dir: RunDir) -> None:
    from engine.run.storage.store import Store

    with Store(run_dir.store) as store:
        for step in range(1, 4):
            store.add_step(make_sample(step, mem_kind="cuda"))
        store.append_event("run_ended", message="completed at step 3")
        store.update_meta(state="completed")
    app = MemtuiApp(run_dir, live=False, view=stored_view(run_dir))
    async with app.run_test(size=(100, 30)):
        await until(lambda: "completed" in text_of(app.query_one(RunHeader)))
        assert "history" in text_of(app.query_one(RunHeader))
        assert "CUDA device memory" in str(app.query_one(MemoryPanel).border_title)
        assert "completed at step 3" in text_of(app.query_one(EventLog))
        assert app.client is None


def test_no_color_is_honoured_by_textual(run_dir: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert MemtuiApp(run_dir, live=False).no_color


async def test_live_console_opens_on_stored_history_then_replays_only_newer(
    live_run: RunDir, fake: ScriptedEngine
) -> None:
    import dataclasses

    from engine.run.storage.store import Store

    with Store(live_run.store) as store:  # what the supervisor stored before we attached
        store.add_step(make_sample(3))
        store.append_event("run_started", message="run started")
        store.append_event("trainer_started", message="trainer attempt 1")
        store.update_meta(state="running")
    view = dataclasses.replace(stored_view(live_run), connection="connecting")
    assert view.step == 3 and view.last_seq == 2
    app = MemtuiApp(live_run, view=view)
    async with app.run_test():
        await until(lambda: app.view.step == 5 and app.view.connection == "connected")
        fake.add_event("note", "newer")
        await until(lambda: app.view.last_seq == 3)
    assert fake.hellos[0].replay_from == 2
    assert [e.seq for e in app.view.events] == [1, 2, 3]


async def test_supervisor_restart_while_attached_recovers(live_run: RunDir, fake: ScriptedEngine) -> None:
    """The supervisor goes away (socket gone) and a new one comes up: the header says so, then recovers."""
    from memtui.console.widgets.run_header import RunHeader

    app = MemtuiApp(live_run)
    async with app.run_test(size=(100, 30)):
        await until(lambda: app.view.last_seq == 2)
        assert app.client is not None
        app.client._backoff = (0.05, 0.2)
        events = list(fake.events)
        await fake.close()  # the old supervisor exits
        await until(lambda: app.view.connection == "disconnected")
        await until(lambda: "disconnected" in text_of(app.query_one(RunHeader)))
        async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), events=events) as restarted:
            restarted.add_event("supervisor_restarted", "supervisor back")
            await until(lambda: app.view.connection == "connected" and app.view.last_seq == 3)
            await until(lambda: "live" in text_of(app.query_one(RunHeader)))
            await until(lambda: "supervisor back" in text_of(app.query_one(EventLog)))
        assert restarted.hellos[-1].replay_from == 2
