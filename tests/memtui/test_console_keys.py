"""The console driven by keys alone at 80x24: ↓/↑ and enter reach the pending directives
without Tab, the focused panel shows, the directive detail's keys answer and its age moves,
the chaos form submits with enter, and a read-only console offers no command."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Select

from engine.chaos.table import chaos_specs
from memtui.console.actions import method_of
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from memtui.console.screens.chaos_form_screen import ChaosFormScreen
from memtui.console.screens.clamp_screen import ClampScreen
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.directive_screen import DirectiveScreen
from memtui.console.widgets.directives_panel import DirectivesPanel
from memtui.console.widgets.memory_panel import MemoryPanel
from memtui.console.widgets.numerics_panel import NumericsPanel
from tests.fakes.run_script import make_directive, make_event
from tests.fakes.scripted_engine import ScriptedEngine, welcome_for
from tests.memtui.console_harness import recorded_notes
from tests.memtui.test_console_snapshot import NOW, console, fixed_run, scripted_events, until_drawn
from tests.waiting import until

SMALL = (80, 24)


def two_directives() -> list:  # type: ignore[type-arg]
    second = make_directive("d-8", created_at=NOW - 30, expires_at=NOW + 270, step=239)
    data = {"directive": second.model_dump(mode="json")}
    return [*scripted_events(), make_event(6, "directive_proposed", "directive d-8 from rules", data=data)]


def history(home: Path) -> MemtuiApp:
    run = fixed_run(home)
    view = stored_view(run)
    for event in scripted_events():
        view = view.with_event(event)
    return MemtuiApp(run, live=False, view=view, clock=lambda: NOW)


async def test_arrows_and_enter_reach_the_directives_without_tab(home: Path) -> None:
    run = fixed_run(home)
    with ScriptedEngine.in_thread(run.socket, welcome_for(run.run_id), events=two_directives()):
        app = console(run, "dark")
        async with app.run_test(size=SMALL) as pilot:
            await until_drawn(pilot, last_seq=6, step=240)
            panel = app.query_one(DirectivesPanel)
            assert not panel.has_focus
            await pilot.press("down")
            assert panel.current() is not None and panel.current().id == "d-8"  # type: ignore[union-attr]
            await pilot.press("up", "enter")
            await until(lambda: isinstance(app.screen, DirectiveScreen), what="the detail")
            assert app.screen.directive.id == "d-7"  # type: ignore[attr-defined]


async def test_the_focused_panel_is_marked(home: Path) -> None:
    async with history(home).run_test(size=SMALL) as pilot:
        app = pilot.app
        app.query_one(NumericsPanel).focus()
        await pilot.pause()
        focused, other = app.query_one(NumericsPanel), app.query_one(MemoryPanel)
        assert focused.styles.border_top[0] != other.styles.border_top[0]


async def test_the_directive_detail_answers_with_its_keys_and_its_age_moves(home: Path) -> None:
    now = [NOW]
    run = fixed_run(home)
    with ScriptedEngine.in_thread(run.socket, welcome_for(run.run_id), events=scripted_events()):
        app = console(run, "dark")
        app._clock = lambda: now[0]
        async with app.run_test(size=SMALL) as pilot:
            await until_drawn(pilot, step=240)
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, DirectiveScreen), what="the detail")
            assert "age 1m02s" in str(app.screen.query_one("#details").visual)
            now[0] += 60
            await until(lambda: "age 2m02s" in str(app.screen.query_one("#details").visual), what="age")
            await pilot.press("c")
            await until(lambda: isinstance(app.screen, ClampScreen), what="the clamp form")
            await pilot.press("escape", "enter", "a")
            await until(lambda: isinstance(app.screen, ConfirmScreen), what="approve's question")


async def test_the_oom_form_submits_with_enter_from_its_select(home: Path) -> None:
    run = fixed_run(home)
    app = MemtuiApp(run, live=False, view=stored_view(run), clock=lambda: NOW)
    (spec,) = chaos_specs(["oom"])
    got: list[object] = []
    async with app.run_test(size=SMALL) as pilot:
        form = ChaosFormScreen(spec)
        await app.push_screen(form, got.append)
        form.query_one(Select).focus()
        await pilot.press("enter")
        await until(lambda: got, what="the form's request")
        assert got[0] is not None and got[0].kind == "oom"  # type: ignore[attr-defined]


async def test_read_only_history_shows_no_command_and_says_so_at_once(home: Path) -> None:
    app = history(home)
    notes = recorded_notes(app)
    async with app.run_test(size=SMALL) as pilot:
        shown = {
            method_of(b.binding.action) for b in app.active_bindings.values() if b.enabled and b.binding.show
        }
        assert not shown & {"approve", "clamp", "reject", "stop", "pause", "unpause"}
        await pilot.press("s")
        await until(lambda: [t for _, t in notes if t.startswith("read-only")], what="refusal")
        assert not isinstance(app.screen, ConfirmScreen)
