"""The console's house: one App on a main screen that owns the panels, one fold for what the
supervisor sends (``RunView.apply``, the one the view's own tests use), and one modal base
that every box over the main screen derives from (its look in one place, esc closes it,
enter submits a form)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from textual.screen import ModalScreen
from textual.widgets import Input

import memtui.console.screens
from engine.events import DirectiveProposed
from engine.hardware_report import HardwareSnapshot
from engine.run.directory import RunDir
from engine.wire.protocol import EventMessage, Hardware, ServerMessage, Telemetry, Welcome
from memtui.console.app import MemtuiApp
from memtui.console.main_screen import MainScreen
from memtui.console.run_view import RunView
from memtui.console.screens.clamp_screen import ClampScreen
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.modal import Modal
from memtui.console.screens.reject_screen import RejectScreen
from memtui.console.widgets.directives_panel import DirectivesPanel
from tests.fakes.run_script import make_directive, make_event, make_sample
from tests.waiting import until

SHARED_CSS = ("align: center middle", "background: $surface")
"""The modal box's look, said once in ``Modal``."""


def modal_screens() -> list[type[ModalScreen[Any]]]:
    package = memtui.console.screens
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found += [
            c
            for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, ModalScreen) and c.__module__ == module.__name__
        ]
    return found


def test_every_modal_derives_from_the_one_base_and_says_only_what_differs() -> None:
    screens = [c for c in modal_screens() if c is not Modal]
    assert len(screens) >= 11
    for screen in screens:
        assert issubclass(screen, Modal), screen
        css = screen.__dict__.get("DEFAULT_CSS", "")
        assert not [shared for shared in SHARED_CSS if shared in css], screen


def messages() -> list[ServerMessage]:
    proposed = DirectiveProposed(directive=make_directive())
    snapshot = HardwareSnapshot(ts=1_700_000_000.0, nvml="NVML: not here")
    return [
        Welcome(run_id="r", state="running", last_seq=0),
        Telemetry(sample=make_sample(3), state="running"),
        EventMessage(event=make_event(1, proposed)),
        Hardware(snapshot=snapshot),
    ]


async def test_the_app_folds_what_arrives_through_run_view_apply(
    run_dir: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    folded: list[ServerMessage] = []
    apply = RunView.apply

    def recorded(view: RunView, message: ServerMessage, now: float) -> RunView:
        folded.append(message)
        return apply(view, message, now)

    monkeypatch.setattr(RunView, "apply", recorded)
    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"), clock=lambda: 1_700_000_000.0)
    async with app.run_test():
        expected = RunView(run_id="r")
        for message in messages():
            app._relay(message)
            expected = apply(expected, message, 1_700_000_000.0)
        assert folded == messages() and app.view == expected


async def test_the_main_screen_owns_the_panels_the_app_acts_on_them(run_dir: RunDir) -> None:
    view = RunView(run_id="r").with_event(make_event(1, DirectiveProposed(directive=make_directive())))
    app = MemtuiApp(run_dir, live=False, view=view)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.screen is app.main and isinstance(app.main, MainScreen)
        await pilot.press("enter")  # the details, over the main screen
        await until(lambda: app.screen is not app.main, what="the directive detail")
        assert app.main.query_one(DirectivesPanel).current() is not None  # still reachable


async def test_esc_closes_every_modal_and_enter_submits_a_form(run_dir: RunDir) -> None:
    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"))
    got: list[object] = []
    directive = make_directive()
    async with app.run_test(size=(120, 40)) as pilot:
        for screen, keys in [
            (ConfirmScreen("Stop", "stop?"), ["escape"]),
            (RejectScreen(directive), ["escape"]),
            (RejectScreen(directive), [*"too high", "enter"]),
            (ClampScreen(directive), ["enter"]),
        ]:
            await app.push_screen(screen, got.append)
            if screen.query(Input):
                screen.query(Input).first().focus()
            await pilot.press(*keys)
            await until(lambda: app.screen is app.main, what=f"{type(screen).__name__} closed")
    assert got[:3] == [False, None, "too high"]
    assert isinstance(got[3], dict) and got[3]  # the clamp's values, as they stood
