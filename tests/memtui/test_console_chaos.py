"""The console's chaos menu against a scripted transport: it offers exactly the kinds the engine
advertises, the form's values reach the engine after a confirmation (and a kill from the console
restarts the real supervisor's trainer), a wrong value is refused
in the form naming the field, injection and recovery read well in the event timeline, and
``--readonly`` hides and refuses all of it."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Input, OptionList, Select, Static

from engine.chaos.kinds.memory import Ballast, Oom
from engine.chaos.kinds.processes import Kill
from engine.chaos.table import chaos_specs
from engine.checkpoints.store import CheckpointStore
from engine.events import ChaosApplied, ChaosInjected, ChaosRecovered
from engine.run.directory import RunDir
from engine.wire.protocol import Chaos, ClientMessage, Error, Ok, ServerMessage
from memtui.chaos.chaos_phrases import what_happens
from memtui.console.app import MemtuiApp
from memtui.console.screens.chaos_form_screen import ChaosFormScreen
from memtui.console.screens.chaos_menu_screen import ChaosMenuScreen
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.widgets.event_log import EventLog
from memtui.run_facts import run_facts
from tests.engine.checkpoint_samples import FIELDS, writer
from tests.fakes.run_script import FAKE_TRAINER_PID, make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, answer_ok, telemetry, welcome_for
from tests.live_supervisor import LiveRun
from tests.memtui.console_harness import caught_up, recorded_notes, text_of, toasts
from tests.waiting import until

ADVERTISED = ["ballast", "oom", "kill"]


def chaos_engine(run: RunDir, kinds: list[str], refusal: str | None = None, **scene: Any) -> ScriptedEngine:
    """An engine advertising ``kinds`` that answers a Chaos as the supervisor does (its id, kind
    and the pid of a trainer it kills), or refuses every one with ``refusal``."""

    def reply(message: ClientMessage) -> list[ServerMessage]:
        if not isinstance(message, Chaos):
            return answer_ok(message)
        kind = message.request.kind
        if refusal is not None:
            return [Error(id=message.id, reason=f"chaos {kind}: {refusal}")]
        pid = FAKE_TRAINER_PID if kind in ("kill", "preempt") else None
        return [Ok(id=message.id, result={"chaos_id": "c-fake1", "kind": kind, "pid": pid})]

    welcome = welcome_for(run.run_id, chaos=chaos_specs(kinds))
    return ScriptedEngine(run.socket, welcome, reply=reply, **scene)


@pytest.fixture
async def fake(live_run: RunDir):  # type: ignore[no-untyped-def]
    events = [make_event(1, "run_started", "run started")]
    stream = telemetry([make_sample(1), make_sample(2)])
    async with chaos_engine(live_run, ADVERTISED, events=events, stream=stream) as engine:
        yield engine


async def ready(app: MemtuiApp) -> None:
    """Connected, and the Welcome's chaos kinds folded into the view."""
    await until(lambda: app.view.connection == "connected" and app.view.chaos, what="the welcome")


def chaos_requests(fake: ScriptedEngine) -> list:  # type: ignore[type-arg]
    return [m for m in fake.requests if m.kind == "chaos"]


async def test_the_menu_offers_exactly_what_the_engine_advertises(
    live_run: RunDir, fake: ScriptedEngine
) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app)
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ChaosMenuScreen)
        options = app.screen.query_one(OptionList)
        offered = [options.get_option_at_index(i).id for i in range(options.option_count)]
        assert offered == ADVERTISED
        await until(lambda: "holds extra memory" in text_of(app.screen.query_one("#about", Static)))
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ChaosMenuScreen)
        palette = [c for c in app.palette_commands() if c[0].startswith("Chaos: ")]
        assert [c[2] for c in palette] == ["chaos_menu", *(f"chaos('{k}')" for k in ADVERTISED)]
        assert "Chaos: memory pressure" in {c[0] for c in palette}
    assert chaos_requests(fake) == []


async def test_the_forms_values_reach_the_engine_after_a_confirmation(
    live_run: RunDir, fake: ScriptedEngine
) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app)
        await pilot.press("x", "enter")  # the first kind: memory pressure (ballast)
        await pilot.pause()
        assert isinstance(app.screen, ChaosFormScreen) and app.screen.spec.kind == "ballast"
        form = app.screen
        assert form.query_one("#param-bytes", Input).value == "256M"  # the defaults, filled in
        assert form.query_one("#param-steps", Input).value == "50"
        form.query_one("#param-bytes", Input).value = "64M"
        form.query_one("#param-steps", Input).value = "7"
        form.query_one("#param-steps", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        said = text_of(app.screen.query_one(Static))
        assert "hold 64.0 MiB of ballast for 7 steps" in said and "bytes 64.0 MiB  steps 7" in said
        assert chaos_requests(fake) == []  # nothing before the yes
        await pilot.press("y")
        await until(lambda: chaos_requests(fake), what="the chaos request")
        assert fake.requests[-1].request == Ballast(bytes=64 * 2**20, steps=7)


async def test_a_choice_param_is_a_select_and_reaches_the_engine(
    live_run: RunDir, fake: ScriptedEngine
) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app)
        await app.run_action("chaos('oom')")  # the palette's entry
        await pilot.pause()
        assert isinstance(app.screen, ChaosFormScreen)
        phase = app.screen.query_one("#param-phase", Select)
        assert phase.value == "forward"
        phase.value = "backward"
        await pilot.click("#continue")
        await until(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        assert "next step's backward pass" in text_of(app.screen.query_one(Static))
        await pilot.press("y")
        await until(lambda: chaos_requests(fake), what="the chaos request")
        assert fake.requests[-1].request == Oom(phase="backward")


@pytest.mark.parametrize(
    ("field", "text", "says"),
    [
        ("bytes", "-5", "bytes: must be at least 1 B, got -5"),
        ("bytes", "lots", "bytes: not a size: 'lots'"),
        ("steps", "2.5", "steps: not an integer: '2.5'"),
        ("steps", "99999999999", "steps: must be at most 10000000"),
    ],
)
async def test_a_wrong_value_is_refused_in_the_form_naming_the_field(
    live_run: RunDir, fake: ScriptedEngine, field: str, text: str, says: str
) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app)
        await app.run_action("chaos('ballast')")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, ChaosFormScreen)
        form.query_one(f"#param-{field}", Input).value = text
        await pilot.click("#continue")
        await until(lambda: says in text_of(form.query_one("#error", Static)), what="the refusal")
        assert app.screen is form  # the form stays, saying which field and why
        assert form.query_one(f"#param-{field}", Input).has_class("-invalid")
        assert app.focused is form.query_one(f"#param-{field}", Input)  # focus on the wrong one
        form.query_one(f"#param-{field}", Input).value = "3"  # corrected: enter goes on
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        await pilot.press("n")
        await caught_up(app, pilot)
    assert chaos_requests(fake) == []


@pytest.mark.slow
async def test_a_kind_without_parameters_skips_the_form(live: LiveRun) -> None:
    app = MemtuiApp(live.run)
    notes = recorded_notes(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app)
        await app.run_action("chaos('kill')")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "SIGKILL the trainer" in text_of(app.screen.query_one(Static))
        await pilot.press("y")
        await until(lambda: [m.kind for m in app.sent] == ["chaos"], what="the chaos request")
        assert app.sent[-1].request == Kill()
        injected = await until(lambda: next((e for e in app.view.events if e.type == "chaos_injected"), None))
        chaos_id = injected.data["chaos_id"]
        answer = f"chaos: {chaos_id} injected: {what_happens('kill', {}, run_facts(live.run))}"
        await until(lambda: answer in toasts(notes), what="the answer")  # beside the kill's alert
        recovered = await until(
            lambda: next((e for e in app.view.events if e.type == "chaos_recovered"), None)
        )
        assert recovered.data["chaos_id"] == chaos_id and recovered.data["recovered"] is True  # restarted


async def test_the_engines_refusal_is_shown(live_run: RunDir) -> None:
    refusal = "the run is stopped: there is nothing to inject into"
    async with chaos_engine(live_run, ADVERTISED, refusal) as fake:
        app = MemtuiApp(live_run)
        notes = recorded_notes(app)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app)
            await pilot.press("k", "y")
            said = await until(lambda: toasts(notes), what="the refusal")
            assert said == ["chaos refused: chaos kill: the run is stopped: there is nothing to inject into"]
        assert [m.kind for m in chaos_requests(fake)] == ["chaos"]


async def test_a_kind_the_engine_does_not_advertise_is_not_offered(
    live_run: RunDir, fake: ScriptedEngine
) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app)
        assert "chaos('nan_loss')" not in {c[2] for c in app.palette_commands()}
        await app.run_action("chaos('nan_loss')")  # e.g. an old palette entry
        await pilot.pause()
        assert not isinstance(app.screen, (ChaosFormScreen, ConfirmScreen))
        await caught_up(app, pilot)
    assert chaos_requests(fake) == []


async def test_injection_and_recovery_read_well_in_the_timeline(
    live_run: RunDir, fake: ScriptedEngine
) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(app)
        fake.add_event(
            ChaosInjected(chaos_id="c-1", kind="ballast", params={"bytes": 2**28, "steps": 50}, step=120),
            "chaos: ballast",
        )
        fake.add_event(ChaosApplied(chaos_id="c-1", kind="ballast", step=121), "applied")
        fake.add_event(
            ChaosRecovered(
                chaos_id="c-1",
                kind="ballast",
                recovered=True,
                seconds=12.3,
                step=171,
                detail="memory back under the warning level",
            ),
            "recovered",
        )
        fake.add_event(ChaosInjected(chaos_id="c-2", kind="kill", pid=4242, source="schedule"), "kill")
        fake.add_event(
            ChaosRecovered(chaos_id="c-2", kind="kill", recovered=False, seconds=600.0, detail="no step"),
            "not recovered",
            severity="critical",
        )
        fake.add_event("checkpoint_saved", "checkpoint step 200")
        log = app.query_one(EventLog)
        while log.kind != "chaos":
            await pilot.press("e")
        await until(lambda: "c-2" in text_of(log), what="the chaos events drawn", seen=lambda: text_of(log))
        shown = text_of(log)
        assert "chaos c-1 injected at step 120: hold 256 MiB of ballast for 50 steps" in shown
        assert "chaos c-1 (memory pressure) took effect from step 122" in shown  # 121 steps done
        recovered = "chaos c-1 (memory pressure) recovered after 12s at step 171"
        assert f"{recovered}: memory back under the warning level" in shown
        assert "chaos c-2 injected by the schedule: SIGKILL the trainer" in shown
        assert "chaos c-2 (kill the trainer) NOT recovered after 10m00s: no step" in shown
        assert "checkpoint step 200" not in shown  # the chaos filter


async def test_readonly_hides_and_refuses_chaos(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app)
        for key in ("x", "k"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, (ChaosMenuScreen, ChaosFormScreen, ConfirmScreen)), key
        for action in ("chaos_menu", "chaos('ballast')", "chaos('kill')", "kill_trainer"):
            await app.run_action(action)
            await pilot.pause()
            assert not isinstance(app.screen, (ChaosMenuScreen, ChaosFormScreen, ConfirmScreen)), action
        assert not [c for c in app.palette_commands() if c[0].startswith("Chaos")]
        app._confirm_chaos(app.offered_chaos()[0], Ballast())  # even past the menu: refused on sending
        await pilot.press("y")
        await caught_up(app, pilot)
        assert [m.kind for m in app.sent] == []
    assert chaos_requests(fake) == []


async def test_an_engine_that_advertises_no_chaos_gets_no_menu(live_run: RunDir) -> None:
    async with chaos_engine(live_run, []) as fake:
        app = MemtuiApp(live_run)
        notes = recorded_notes(app)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(lambda: app.view.connection == "connected", what="the welcome")
            assert not [c for c in app.palette_commands() if c[0].startswith("Chaos")]
            for key in ("x", "k"):
                await pilot.press(key)
                await pilot.pause()
                assert not isinstance(app.screen, (ChaosMenuScreen, ChaosFormScreen, ConfirmScreen)), key
            said = await until(lambda: toasts(notes), what="the console to say why")
            assert "this run offers no chaos" in said[0]
            await caught_up(app, pilot)
        assert chaos_requests(fake) == []


async def confirmation_of(app: MemtuiApp, pilot, ups: int) -> str:  # type: ignore[no-untyped-def]
    """The confirmation's words for the kind ``ups`` above the menu's last one; cancelled."""
    await pilot.press("x", "end", *["up"] * ups, "enter")
    await until(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
    text = " ".join(text_of(app.screen.query_one(Static)).split())
    await pilot.press("n")
    await until(lambda: not isinstance(app.screen, ConfirmScreen), what="the confirmation to close")
    return text


async def test_confirmations_say_what_happens_to_this_run(live_run: RunDir) -> None:
    kinds = ["kill", "preempt", "corrupt_checkpoint"]  # the menu's last three: 2, 1, 0 up from the end
    async with chaos_engine(live_run, kinds) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=(140, 40)) as pilot:
            await ready(app)
            kill = await confirmation_of(app, pilot, 2)
            assert "restarts it from step 0 (no verified checkpoint yet)" in kill
            preempt = await confirmation_of(app, pilot, 1)  # run.json: restart.on_preemption false
            assert "this run ends there (restart.on_preemption is false" in preempt
            store = CheckpointStore(live_run.checkpoints)
            assert store.save(40, writer(store.directory, 40), FIELDS, estimate_bytes=1000).status == "saved"
            kill = await confirmation_of(app, pilot, 2)
            assert "restarts it from step 40, the newest verified checkpoint" in kill
            corrupt = await confirmation_of(app, pilot, 0)
            assert "(step 40), the only one that verifies" in corrupt and "the one before" not in corrupt
    assert chaos_requests(fake) == []


async def test_the_whole_menu_fits_at_80x24_with_every_kind_offered(live_run: RunDir) -> None:
    """At the smallest size we promise, the description of the highlighted kind and the hint
    line stay on screen (the list scrolls instead), with every kind the engine can offer."""
    every = [spec.kind for spec in chaos_specs()]
    async with chaos_engine(live_run, every, events=[make_event(1, "run_started", "run started")]):
        app = MemtuiApp(live_run)
        async with app.run_test(size=(80, 24)) as pilot:
            await ready(app)
            await pilot.press("x")
            await until(lambda: isinstance(app.screen, ChaosMenuScreen), what="the menu")
            await pilot.press("down")
            await pilot.pause()
            shown = drawn_text(app)  # what the terminal shows, not what the widgets hold
            assert "enter chooses (then asks first) · esc cancels" in shown
            description = chaos_specs(["release"])[0].description
            assert " ".join(description.split()[:6]) in shown  # the highlighted kind's words


def drawn_text(app: MemtuiApp) -> str:
    """The screen's text as drawn (its SVG screenshot's text, spaces as spaces)."""
    import html
    import re

    svg = app.export_screenshot()
    return " ".join(
        html.unescape(" ".join(re.findall(r">([^<>]+)</text>", svg))).replace("\xa0", " ").split()
    )
