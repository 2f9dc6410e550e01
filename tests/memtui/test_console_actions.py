"""Every operator key sends the right command (after asking where it must) and the real
supervisor does what it asks; ``--readonly`` hides and refuses them all. Display keys change
only the display (a scripted transport: it records that nothing was sent)."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from engine.chaos.table import KINDS
from engine.run.directory import RunDir
from memtui.console.actions import RUN_CHANGING, method_of
from memtui.console.app import MemtuiApp
from memtui.console.screens.clamp_screen import ClampScreen
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.directive_screen import DirectiveScreen
from memtui.console.screens.keys_screen import KeysScreen
from memtui.console.screens.reject_screen import RejectScreen
from memtui.console.widgets.directives_panel import DirectivesPanel
from memtui.console.widgets.event_log import EventLog
from memtui.console.widgets.memory_panel import MemoryPanel
from tests.fakes.run_script import make_directive, make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.live_supervisor import LiveRun
from tests.memtui.console_harness import caught_up
from tests.waiting import until


def proposed(seq: int, directive_id: str, **over: Any) -> Any:
    view = make_directive(directive_id, **over)
    data = {"directive": view.model_dump(mode="json")}
    return make_event(seq, "directive_proposed", f"directive {directive_id} from rules", data=data)


@pytest.fixture
async def fake(live_run: RunDir):  # type: ignore[no-untyped-def]
    """A scene of two pending directives, replayed: for keys that must send nothing."""
    events = [
        make_event(1, "run_started", "run started"),
        proposed(2, "d-1"),
        proposed(3, "d-2", requested={"micro_batch_size": 16}, allowed={"micro_batch_size": 12}),
    ]
    stream = telemetry([make_sample(1), make_sample(2)])
    async with ScriptedEngine(
        live_run.socket, welcome_for(live_run.run_id), events=events, stream=stream
    ) as engine:
        yield engine


@pytest.fixture
async def pending(live: LiveRun) -> list[str]:
    """Two directives the operator proposed to the real supervisor, pending: their ids."""
    return [
        await live.propose(lr_multiplier=0.5, gradient_clip_norm=1.0),
        await live.propose(lr_multiplier=0.7, gradient_clip_norm=0.9),
    ]


async def ready(app: MemtuiApp, pilot) -> None:  # type: ignore[no-untyped-def]
    """Connected, and both directives drawn: the keys act on the panel's cursor."""
    await until(lambda: app.view.connection == "connected" and len(app.view.directives) == 2)
    await until(lambda: "2 pending" in str(app.query_one(DirectivesPanel).border_title))


def kinds(app: MemtuiApp) -> list[str]:
    """The kinds of the requests the console sent (its own record)."""
    return [m.kind for m in app.sent]


@pytest.mark.slow
async def test_approve_asks_then_sends_approve(live: LiveRun, pending: list[str]) -> None:
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # backing out sends nothing
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.sent == []
        await pilot.press("a", "y")
        await until(lambda: "approve" in kinds(app))
        assert kinds(app) == ["approve"] and app.sent[-1].directive_id == pending[0]
        await until(lambda: [d.id for d in app.view.directives] == pending[1:])  # decided: no longer pending
        await until(lambda: live.directive(pending[0]).state == "applied", what="the trainer applying it")
        await until(lambda: any(e.type == "directive_applied" for e in app.view.events))


@pytest.mark.slow
async def test_cursor_picks_the_directive_and_enter_shows_details(live: LiveRun, pending: list[str]) -> None:
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.query_one(DirectivesPanel).focus()
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DirectiveScreen) and app.screen.directive.id == pending[1]
        await pilot.press("escape", "r")
        await pilot.pause()
        assert isinstance(app.screen, RejectScreen)
        await pilot.press(*"too big", "enter")
        await until(lambda: "reject" in kinds(app))
        reject = app.sent[-1]
        assert reject.directive_id == pending[1] and reject.reason == "too big"
        await until(lambda: live.directive(pending[1]).state == "rejected")


@pytest.mark.slow
async def test_clamp_edits_values_and_the_policy_rechecks(live: LiveRun, pending: list[str]) -> None:
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ClampScreen)
        await pilot.press("ctrl+a", "ctrl+k", *"0.3", "enter")  # lr multiplier; clip norm stays 1
        await until(lambda: "clamp" in kinds(app))
        clamp = app.sent[-1]
        assert clamp.directive_id == pending[0] and clamp.values == {
            "lr_multiplier": 0.3,
            "gradient_clip_norm": 1.0,
        }
        await until(lambda: [d.id for d in app.view.directives] == pending[1:])
        await until(
            lambda: live.directive(pending[0]).state in ("clamped", "applied"),
            what="the clamp admitted",
            seen=lambda: live.directive(pending[0]),
        )


@pytest.mark.slow
async def test_clamp_outside_the_bounds_is_rejected_on_the_policys_recheck(
    live: LiveRun, pending: list[str]
) -> None:
    """An operator's number is not moved into the bounds; the directive is rejected, with the
    field named, and nothing is applied."""
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("c")
        await pilot.pause()
        await pilot.press("ctrl+a", "ctrl+k", *"0.95", "enter")
        await until(lambda: "clamp" in kinds(app))
        await until(lambda: [d.id for d in app.view.directives] == pending[1:])
        rejected = live.directive(pending[0])
        assert rejected.state == "rejected" and rejected.allowed == {}
        assert "lr_multiplier 0.95 is outside the policy bounds [0.05, 0.85]" in rejected.reasons
        await caught_up(app, pilot)
        assert "directive_applied" not in {e.type for e in app.view.events}  # none was scheduled


@pytest.mark.slow
async def test_stop_needs_a_yes(live: LiveRun, pending: list[str]) -> None:
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.sent == []
        await pilot.press("s", "y")
        await until(lambda: "stop" in kinds(app))
        assert kinds(app) == ["stop"]
        await until(lambda: app.view.state == "stopped")
        assert app.is_running  # stopping the run does not close the console


@pytest.mark.slow
async def test_kill_trainer_is_chaos_behind_a_confirmation(live: LiveRun, pending: list[str]) -> None:
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: "chaos" in kinds(app))
        assert app.sent[-1].request.kind == "kill"
        await until(lambda: any(e.type == "chaos_injected" for e in app.view.events))
        await until(lambda: any(e.type == "chaos_recovered" for e in app.view.events), what="the restart")


@pytest.mark.slow
async def test_palette_lists_chaos_and_runs_it_after_asking(live: LiveRun, pending: list[str]) -> None:
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        titles = [t for t, _, _ in app.palette_commands()]
        assert "Directive: approve" in titles and "Theme: ansi" in titles
        # the supervisor advertises every kind: one entry each, in menu order
        expected = ["Chaos: menu"] + [f"Chaos: {model.title}" for model in KINDS.values()]
        assert [t for t in titles if t.startswith("Chaos: ")] == expected
        await app.run_action("chaos('kill')")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: "chaos" in kinds(app))
        assert app.sent[-1].request.kind == "kill"


async def test_readonly_hides_and_refuses_every_action(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for key in ("a", "c", "r", "s", "k", "x", "P"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, (ConfirmScreen, ClampScreen, RejectScreen)), key
        for action in ("approve", "stop", "pause", "unpause", "chaos('kill')", "chaos_menu"):
            await app.run_action(action)
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        shown = {method_of(b.binding.action) for b in app.active_bindings.values() if b.enabled}
        assert not shown & RUN_CHANGING, shown
        assert not any(method_of(c[2]) in RUN_CHANGING for c in app.palette_commands())
        from engine.wire.protocol import Stop

        app.send_request(Stop(id="x"), "stopping")  # even a direct call is refused
        assert app.sent == []  # the console's record of every request it sends
        await caught_up(app, pilot)  # a Ping on the same connection: the engine got nothing before it
        assert [m.kind for m in fake.requests] == ["ping"]


async def test_display_keys(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("1")
        assert not app.query_one(MemoryPanel).display
        await pilot.press("1")
        assert app.query_one(MemoryPanel).display
        app.query_one(MemoryPanel).focus()
        await pilot.press("z")
        assert app.screen.maximized is app.query_one(MemoryPanel)
        await pilot.press("z")
        assert app.screen.maximized is None
        await pilot.press("e")
        assert app.query_one(EventLog).kind == "alerts"
        await pilot.press("f")
        assert app.main.frozen
        step = app.query_one(MemoryPanel)._view
        app.main._drawn_at = -math.inf  # were it not frozen, new data would be drawn at once, not on a timer
        fake.send_telemetry(make_sample(9))
        await until(lambda: app.view.step == 9)  # data still arrives ...
        await pilot.pause()  # ... what its arrival queued has run ...
        assert app.query_one(MemoryPanel)._view is step  # ... but the panels hold still
        await pilot.press("f")
        assert app.query_one(MemoryPanel)._view is app.view
        theme = app.theme
        await pilot.press("t")
        assert app.theme != theme
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, KeysScreen)
        await pilot.press("escape")
    assert fake.requests == []


async def test_window_key_reads_the_store_in_a_thread(
    live_run: RunDir, fake: ScriptedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memtui.console.window_reader
    from engine.run.storage.store import Store

    with Store(live_run.store) as store:
        for step in range(1, 501):
            store.add_step(make_sample(step, ts=1_700_000_000.0 + step))
    readers: list[int] = []  # the thread of each read of the store
    read_window = memtui.console.window_reader.read_window

    def noted(*args: Any, **kwargs: Any) -> Any:
        readers.append(threading.get_ident())
        return read_window(*args, **kwargs)

    monkeypatch.setattr(memtui.console.window_reader, "read_window", noted)
    app = MemtuiApp(live_run, clock=lambda: 1_700_000_000.0 + 500)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("w")
        assert app.view.window == "hour"
        await until(lambda: app.view.window_points is not None)
        points = app.view.window_points
        assert points and len(points) <= 240 and points[-1].step == 500
        await pilot.press("w")
        await until(lambda: app.view.window == "run" and app.view.window_points is not None)
        await pilot.press("w")
        assert app.view.window == "live"
    assert len(readers) >= 2 and threading.get_ident() not in readers  # never on the event loop


async def test_screenshot_key_saves_an_svg(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("p")
        await until(lambda: any((live_run.path / "screenshots").glob("*.svg")))


@pytest.mark.slow
async def test_the_palette_proposes_a_field_back_at_its_run_default(
    live: LiveRun, pending: list[str]
) -> None:
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        titles = [t for t, _, _ in app.palette_commands()]
        assert "Directive: reset lr × to the run default" in titles
        await app.run_action("reset_field('lr_multiplier')")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: "propose" in kinds(app))
        assert app.sent[-1].reset == ["lr_multiplier"] and app.sent[-1].values == {}
        back = await until(lambda: next((d for d in app.view.directives if d.id not in pending), None))
        assert back.requested == back.allowed == {"lr_multiplier": 1.0}  # the default, past the 0.85 bound
