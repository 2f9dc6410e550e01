"""Every operator key sends the right command to the fake engine (after asking where it
must), and ``--readonly`` hides and refuses them all. Display keys change only the display."""

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
from tests.fakes.fake_engine import FakeEngine, make_directive, make_event, make_sample
from tests.memtui.console_harness import caught_up
from tests.waiting import until


@pytest.fixture
async def fake(live_run: RunDir):  # type: ignore[no-untyped-def]
    events = [make_event(1, "run_started", "run started")]
    async with FakeEngine(
        live_run.socket, run_id=live_run.run_id, events=events, telemetry=[make_sample(1), make_sample(2)]
    ) as engine:
        engine.propose(make_directive("d-1"))
        engine.propose(
            make_directive(
                "d-2",
                requested={"micro_batch_size": 16},
                allowed={"micro_batch_size": 12},
                bounds={"micro_batch_size": (1, 12)},
            )
        )
        yield engine


async def ready(app: MemtuiApp, pilot) -> None:  # type: ignore[no-untyped-def]
    """Connected, and both directives drawn: the keys act on the panel's cursor."""
    await until(lambda: app.view.connection == "connected" and len(app.view.directives) == 2)
    await until(lambda: "2 pending" in str(app.query_one(DirectivesPanel).border_title))


def kinds(fake: FakeEngine) -> list[str]:
    return [m.kind for m in fake.requests]


async def test_approve_asks_then_sends_approve(live_run: RunDir, fake: FakeEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # backing out sends nothing
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.sent == []
        await pilot.press("a", "y")
        await until(lambda: "approve" in kinds(fake))
        assert kinds(fake) == ["approve"] and fake.requests[-1].directive_id == "d-1"
        await until(lambda: [d.id for d in app.view.directives] == ["d-2"])  # decided: no longer pending


async def test_cursor_picks_the_directive_and_enter_shows_details(live_run: RunDir, fake: FakeEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.query_one(DirectivesPanel).focus()
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DirectiveScreen) and app.screen.directive.id == "d-2"
        await pilot.press("escape", "r")
        await pilot.pause()
        assert isinstance(app.screen, RejectScreen)
        await pilot.press(*"too big", "enter")
        await until(lambda: "reject" in kinds(fake))
        reject = fake.requests[-1]
        assert reject.directive_id == "d-2" and reject.reason == "too big"


async def test_clamp_edits_values_and_the_policy_rechecks(live_run: RunDir, fake: FakeEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ClampScreen)
        await pilot.press("ctrl+a", "ctrl+k", *"0.3", "enter")  # lr multiplier; clip norm stays 1.25
        await until(lambda: "clamp" in kinds(fake))
        clamp = fake.requests[-1]
        assert clamp.directive_id == "d-1" and clamp.values == {
            "lr_multiplier": 0.3,
            "gradient_clip_norm": 1.25,
        }
        await until(lambda: [d.id for d in app.view.directives] == ["d-2"])


async def test_clamp_outside_the_bounds_is_rejected_on_the_policys_recheck(
    live_run: RunDir, fake: FakeEngine
) -> None:
    """As the real supervisor does: an operator's number is not moved into the bounds; the
    directive is rejected, with the field named, and nothing is applied."""
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("c")
        await pilot.pause()
        await pilot.press("ctrl+a", "ctrl+k", *"0.95", "enter")
        await until(lambda: "clamp" in kinds(fake))
        await until(lambda: [d.id for d in app.view.directives] == ["d-2"])
        rejected = fake.directives["d-1"]
        assert rejected.state == "rejected" and rejected.allowed == {}
        assert "lr_multiplier 0.95 is outside the policy bounds [0.1, 0.85]" in rejected.reasons
        assert "directive_applied" not in {e.type for e in fake.events}  # none was scheduled


async def test_stop_needs_a_yes(live_run: RunDir, fake: FakeEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.sent == []
        await pilot.press("s", "y")
        await until(lambda: "stop" in kinds(fake))
        assert kinds(fake) == ["stop"]
        await until(lambda: app.view.state == "stopped")
        assert app.is_running  # stopping the run does not close the console


async def test_kill_trainer_is_chaos_behind_a_confirmation(live_run: RunDir, fake: FakeEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: "chaos" in kinds(fake))
        assert fake.requests[-1].request.kind == "kill"
        await until(lambda: any(e.type == "chaos_injected" for e in app.view.events))


async def test_palette_lists_chaos_and_runs_it_after_asking(live_run: RunDir, fake: FakeEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        titles = [t for t, _, _ in app.palette_commands()]
        assert "Directive: approve" in titles and "Theme: ansi" in titles
        # the fake advertises every kind, as the supervisor does: one entry each, in menu order
        expected = ["Chaos: menu"] + [f"Chaos: {model.title}" for model in KINDS.values()]
        assert [t for t in titles if t.startswith("Chaos: ")] == expected
        await app.run_action("chaos('kill')")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: "chaos" in kinds(fake))
        assert fake.requests[-1].request.kind == "kill"


async def test_readonly_hides_and_refuses_every_action(live_run: RunDir, fake: FakeEngine) -> None:
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
        from engine.protocol import Stop

        app.send_request(Stop(id="x"), "stopping")  # even a direct call is refused
        assert app.sent == []  # the console's record of every request it sends
        await caught_up(app, pilot)  # a Ping on the same connection: the fake got nothing before it
        assert kinds(fake) == ["ping"]


async def test_display_keys(live_run: RunDir, fake: FakeEngine) -> None:
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
    assert kinds(fake) == []


async def test_window_key_reads_the_store_in_a_thread(
    live_run: RunDir, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memtui.console.window_reader
    from engine.run.store import Store

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


async def test_screenshot_key_saves_an_svg(live_run: RunDir, fake: FakeEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("p")
        await until(lambda: any((live_run.path / "screenshots").glob("*.svg")))


async def test_the_palette_proposes_a_field_back_at_its_run_default(
    live_run: RunDir, fake: FakeEngine
) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        titles = [t for t, _, _ in app.palette_commands()]
        assert "Directive: reset lr × to the run default" in titles
        await app.run_action("reset_field('lr_multiplier')")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(lambda: "propose" in kinds(fake))
        assert fake.requests[-1].reset == ["lr_multiplier"] and fake.requests[-1].values == {}
        back = await until(lambda: next((d for d in app.view.directives if d.source == "operator"), None))
        assert back.requested == back.allowed == {"lr_multiplier": 1.0}  # the default, past the 0.85 bound
