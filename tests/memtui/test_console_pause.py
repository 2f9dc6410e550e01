"""Key P pauses a running run and continues a paused one (no confirmation: nothing is lost);
the footer, the keys list and the palette name what P does now; the header shows a paused
run unmistakably, for how long, and does not call its quiet data stale."""

from __future__ import annotations

from typing import Any

import pytest
from textual.content import Content

from engine.events import StateChanged
from engine.run.directory import RunDir
from engine.wire.protocol import ClientMessage, Error, EventMessage, Ok, Pause, ServerMessage
from memtui.console.actions import method_of
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.keys_screen import KeysScreen
from memtui.console.widgets.run_header import RunHeader, render_header
from tests.fakes.run_script import make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, answer_ok, telemetry, welcome_for
from tests.live_supervisor import LiveRun
from tests.memtui.console_harness import caught_up, recorded_notes
from tests.waiting import until


def plain(markup: str) -> str:
    return Content.from_markup(markup).plain


def pauses(app: MemtuiApp) -> list[bool]:
    """The ``paused`` flag of every Pause the console sent, in order."""
    return [m.paused for m in app.sent if isinstance(m, Pause)]


def footer_p(app: MemtuiApp) -> str | None:
    """What the footer says key P does (its keys are ``FooterKey`` widgets)."""
    keys: list[Any] = list(app.query("FooterKey"))
    return next((k.description for k in keys if k.key == "P"), None)


def palette_titles(app: MemtuiApp) -> set[str]:
    return {title for title, _, _ in app.palette_commands()}


def engine(run: RunDir, state: Any = "running", refusal: str | None = None) -> ScriptedEngine:
    """A run in ``state`` whose supervisor answers a Pause as the real one does (the state now,
    then the change of state at the step boundary), or refuses it with ``refusal``."""
    seq = iter(range(2, 100))

    def reply(message: ClientMessage) -> list[ServerMessage]:
        if not isinstance(message, Pause):
            return answer_ok(message)
        if refusal is not None:
            return [Error(id=message.id, reason=refusal)]
        to = "paused" if message.paused else "running"
        changed = make_event(next(seq), StateChanged.model_validate({"from": state, "to": to}))
        return [
            Ok(id=message.id, result={"state": state, "paused": message.paused}),
            EventMessage(event=changed),
        ]

    events = [make_event(1, "run_started", "run started")]
    stream = telemetry([make_sample(1)], state)
    return ScriptedEngine(
        run.socket, welcome_for(run.run_id, state), events=events, stream=stream, reply=reply
    )


@pytest.mark.slow
async def test_p_pauses_then_continues_without_asking(live: LiveRun) -> None:
    app = MemtuiApp(live.run)
    notes = recorded_notes(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(lambda: app.view.connection == "connected" and app.view.step > 0)
        await until(lambda: footer_p(app) == "Pause")
        assert "Run: pause training" in palette_titles(app)
        assert "Run: continue training" not in palette_titles(app)

        await pilot.press("P")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)  # pausing loses nothing: no question
        await until(lambda: app.view.state == "paused")
        assert pauses(app) == [True]
        await until(lambda: ("pause", "the trainer holds at the next step boundary") in notes)
        held = live.supervisor.status().step
        assert live.supervisor.state == "paused"
        assert {"state_changed", "run_paused"} <= {e.type for e in app.view.events}
        await until(lambda: " paused " in plain(app.query_one(RunHeader)._shown))

        # P now continues: the footer, the keys list and the palette say so
        await until(lambda: footer_p(app) == "Continue")
        assert "Run: continue training" in palette_titles(app)
        assert "Run: pause training" not in palette_titles(app)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, KeysScreen)
        assert ("P", "Continue") in app.screen._keys
        assert ("P", "Pause") not in app.screen._keys
        await pilot.press("escape")

        await pilot.press("P")
        await until(lambda: app.view.state == "running")
        assert pauses(app) == [True, False]
        await until(lambda: live.supervisor.status().step > held, what="steps again")
        assert "run_continued" in {e.type for e in app.view.events}
        await until(lambda: ("continue", "training goes on") in notes)
        await until(lambda: footer_p(app) == "Pause")
        assert app.is_running


@pytest.mark.parametrize(("state", "paused"), [("running", True), ("restarting", True), ("paused", False)])
async def test_p_sends_the_pause_that_fits_the_state(live_run: RunDir, state: str, paused: bool) -> None:
    async with engine(live_run, state) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(lambda: app.view.connection == "connected" and app.view.state == state)
            await until(lambda: footer_p(app) == ("Pause" if paused else "Continue"))  # P fits the state
            await pilot.press("P")
            await until(lambda: len(pauses(app)) == 1)
            assert pauses(app) == [paused] and [m.kind for m in fake.requests] == ["pause"]
            await until(lambda: app.view.state == ("paused" if paused else "running"))


async def test_pausing_an_ended_run_shows_the_refusal(live_run: RunDir) -> None:
    """The console knows the run has ended: P says so and sends nothing to refuse."""
    async with engine(live_run, "stopped", "the run is stopped: there is no training to pause") as fake:
        app = MemtuiApp(live_run)
        notes = recorded_notes(app)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(lambda: app.view.connection == "connected" and app.view.state == "stopped")
            await pilot.press("P")
            said = lambda: any("the run has ended (stopped)" in text for _, text in notes)  # noqa: E731
            await until(said, what="the console's own refusal", seen=lambda: notes)
            assert pauses(app) == [] and "pause" not in [m.kind for m in fake.requests]


@pytest.mark.slow
async def test_stop_still_works_while_paused(live: LiveRun) -> None:
    await live.request(Pause(id="hold", paused=True))
    await until(lambda: live.supervisor.state == "paused", what="the trainer holding")
    app = MemtuiApp(live.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(lambda: app.view.connection == "connected" and app.view.state == "paused")
        await pilot.press("s", "y")
        await until(lambda: app.view.state == "stopped")
        assert [m.kind for m in app.sent] == ["stop"]


async def test_readonly_hides_and_refuses_pause(live_run: RunDir) -> None:
    async with engine(live_run) as fake:
        app = MemtuiApp(live_run, readonly=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(lambda: app.view.connection == "connected")
            await pilot.press("P")
            for action in ("pause", "unpause"):
                await app.run_action(action)
            app.action_pause()  # even a direct call is refused
            await pilot.pause()
            assert method_of(app.active_bindings["P"].binding.action) == "refused"  # says why, sends nothing
            assert footer_p(app) is None
            assert not {"Run: pause training", "Run: continue training"} & palette_titles(app)
            assert app.sent == []  # the console's record of every request it sends
            await caught_up(app, pilot)  # a Ping on the same connection: the engine got nothing before it
        assert [m.kind for m in fake.requests] == ["ping"]


def test_header_shows_paused_as_a_badge_with_its_duration() -> None:
    paused_at = make_event(4, "run_paused", "paused at step 40 (operator)", ts=1_000.0)
    view = RunView(run_id="r", state="paused", connection="connected", newest_data_at=990.0)
    view = view.with_event(paused_at)
    markup = render_header(view, 1_065.0)
    identity, progress = markup.split("\n")
    assert "[b reverse $text-accent] paused [/]" in identity
    assert "for 1m05s" in plain(identity)
    assert "$text-warning" not in progress  # 75 s without data is expected while paused

    running = render_header(RunView(run_id="r", state="running", connection="connected"), 0.0)
    assert "reverse" not in running and "paused" not in running
    stale = RunView(run_id="r", state="running", connection="connected", newest_data_at=990.0)
    assert "$text-warning" in render_header(stale, 1_065.0).split("\n")[1]  # running: stale is flagged


async def test_a_run_that_ends_under_the_console_offers_no_command_and_says_why(run_dir: RunDir) -> None:
    """Stop (and every key that changes the run) goes from the footer once the run ends; the
    key says why instead of asking a question whose yes did nothing."""
    app = MemtuiApp(run_dir)
    notes = recorded_notes(app)
    async with engine(run_dir) as fake, app.run_test(size=(120, 40)) as pilot:
        await until(lambda: app.view.connection == "connected" and app.view.step > 0)
        footer = lambda: {k.description for k in app.query("FooterKey")}  # noqa: E731
        await until(lambda: "Stop run" in footer(), what="Stop in the footer of a running run")
        ended = StateChanged.model_validate({"from": "running", "to": "completed"})
        fake.send(EventMessage(event=make_event(5, ended)))
        await until(lambda: app.view.state == "completed")
        await until(lambda: "Stop run" not in footer(), what="Stop gone from the footer", seen=footer)
        assert "Run: stop" not in palette_titles(app)
        await pilot.press("s")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        await until(
            lambda: any("the run has ended (completed)" in text for _, text in notes), seen=lambda: notes
        )
        assert app.sent == []
