"""End to end: chaos from the console and the shell into a real engine (supervisor + DeepSpeed
trainer). The console's menu offers what the real supervisor advertises; ``kill`` chosen
there goes through the form-less confirmation to the supervisor, whose ``chaos_injected``
and the trainer's restart reach the console's timeline; ``memtui chaos --list`` asks the
same supervisor.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home
from textual.widgets import OptionList

from engine.events import ChaosInjected, ChaosRecovered, TrainerRestarted
from engine.run.directory import RunDir, list_runs
from memtui.console.app import MemtuiApp
from memtui.console.screens.chaos_menu_screen import ChaosMenuScreen
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.widgets.event_log import EventLog
from tests.memtui.console_harness import text_of
from tests.waiting import until, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.deepspeed]


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtc")


def start_tiny(home: Path) -> RunDir:
    started = memtui(home, "run", "--preset", "tiny", "--detach", "--steps", "100000")
    assert started.returncode == 0, started.stderr
    (run,) = list_runs(home)
    return run


async def test_kill_from_the_chaos_menu_restarts_the_real_trainer(home: Path) -> None:
    run = start_tiny(home)
    app = MemtuiApp(run)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(
            lambda: app.view.step > 0 and app.view.chaos,
            timeout=120,
            what="the first step",
            seen=lambda: (app.view.connection, app.view.state, app.view.step, app.view.chaos),
        )
        advertised = [s.kind for s in app.view.chaos]
        assert "kill" in advertised

        await pilot.press("x")
        await until(lambda: isinstance(app.screen, ChaosMenuScreen), what="the chaos menu")
        options = app.screen.query_one(OptionList)
        assert [options.get_option_at_index(i).id for i in range(options.option_count)] == advertised
        options.highlighted = advertised.index("kill")
        await pilot.press("enter")
        # the question reads the run's checkpoints first (what a kill would cost): seconds on a
        # loaded machine, where 20 s once passed without it
        await until(lambda: isinstance(app.screen, ConfirmScreen), timeout=120, what="the confirmation")
        await pilot.press("y")

        injected = await until(
            lambda: next((c for e in app.view.events if (c := ChaosInjected.of(e)) is not None), None),
            timeout=30,
            what="chaos_injected from the supervisor",
        )
        assert injected.kind == "kill" and injected.source == "operator" and injected.pid
        restarted = await until(
            lambda: next((r for e in app.view.events if (r := TrainerRestarted.of(e)) is not None), None),
            timeout=60,
            what="the supervisor to restart the killed trainer",
        )
        assert restarted.signal == "SIGKILL"
        log = app.query_one(EventLog)
        await until(
            lambda: (
                f"chaos {injected.chaos_id} injected at step {injected.step}: SIGKILL the trainer"
                in text_of(log)
            ),
            what="the injection in the timeline",
            seen=lambda: text_of(log),
        )
        killed_at = app.view.step
        await until(lambda: app.view.step > killed_at, timeout=120, what="steps after the restart")
        verdict = await until(
            lambda: next((r for e in app.view.events if (r := ChaosRecovered.of(e)) is not None), None),
            timeout=60,
            what="the supervisor's verdict on the kill",
        )
        assert verdict.chaos_id == injected.chaos_id and verdict.recovered
        await until(
            lambda: f"chaos {injected.chaos_id} (kill the trainer) recovered after" in text_of(log),
            what="the recovery in the timeline",
            seen=lambda: text_of(log),
        )

    listed = memtui(home, "chaos", "--list", run.run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [k["kind"] for k in json.loads(listed.stdout)["kinds"]] == advertised
    refused = memtui(home, "chaos", run.run_id, "ballast", "--bytes", "-5")
    assert refused.returncode == 2 and "--bytes: must be at least 1 B" in refused.stderr
    stopped = memtui(home, "stop", run.run_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    wait_for(lambda: run.supervisor_pid() is None, what="the supervisor to exit")
    stale = memtui(home, "chaos", run.run_id, "kill")
    assert stale.returncode == 1 and "the run is not running" in stale.stderr
