"""End to end: the demo (``tiny`` with the rule planner and manual approval) on a real
engine. Within its first 1,000 steps the rule planner suggests something the policy allows
or clamps, with its evidence; an operator approves it in the console (``a``, then ``y`` on
the confirmation); the trainer applies it at a step boundary; its effect (the steps after
against the steps before) is measured and listed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.config.config_file import demo_run_config
from engine.run.directory import RunDir
from engine.run.launch import spawn_supervisor, wait_until_serving
from engine.run.storage.store import Store
from memtui.console.app import MemtuiApp
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.widgets.directives_panel import DirectivesPanel
from tests.waiting import until, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.deepspeed, pytest.mark.timeout(600)]

FIRST_STEPS = 1000  # the suggestion must come from telemetry of the first this many steps


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtp")


def directives(home: Path, run_id: str) -> list[dict]:
    done = memtui(home, "directives", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def approve_in_the_console(run: RunDir) -> str:
    """Attach the console, wait for the planner's first suggestion in its directives panel,
    approve it there (``a``, ``y``); its id once the supervisor took the approval."""
    app = MemtuiApp(run)
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.query_one(DirectivesPanel)
        shown = await until(
            panel.current,  # drawn in the panel: what ``a`` acts on
            timeout=480,
            what="a rule planner suggestion in the directives panel",
            seen=lambda: (app.view.connection, app.view.step, len(app.view.directives)),
        )
        await pilot.press("a")
        await until(lambda: isinstance(app.screen, ConfirmScreen), what="the approval's confirmation")
        await pilot.press("y")
        await until(lambda: not app.view.directives, timeout=60, what="the approval to be taken")
        return shown.id


async def test_the_demo_suggests_an_admissible_directive_whose_effect_is_measured(home: Path) -> None:
    config = demo_run_config()
    assert (config.preset, config.policy.planner, config.policy.approval) == ("tiny", "rules", "manual")
    run = RunDir.create(config, home=home)
    wait_until_serving(run, spawn_supervisor(run), timeout=120)

    approved_id = await approve_in_the_console(run)
    (suggestion,) = [d for d in directives(home, run.run_id) if d["id"] == approved_id]
    assert suggestion["source"] == "rules" and suggestion["step"] <= FIRST_STEPS
    assert suggestion["evidence"] and suggestion["allowed"]  # admitted: allowed or clamped
    early = [d for d in directives(home, run.run_id) if d["step"] <= suggestion["step"]]
    assert all(d["state"] != "rejected" for d in early), early

    measured = wait_for(
        lambda: [d for d in directives(home, run.run_id) if d["id"] == suggestion["id"] and d["effect"]],
        timeout=300,
        what="the applied directive's effect",
        seen=lambda: [(d["id"], d["state"]) for d in directives(home, run.run_id)],
    )[0]
    assert memtui(home, "stop", run.run_id).returncode == 0

    assert measured["state"] == "applied" and measured["allowed"] == suggestion["allowed"]
    effect = measured["effect"]
    steps = config.policy.effect_steps
    assert effect["steps"] == steps
    assert effect["before"]["last_step"] == effect["applied_step"] < effect["after"]["first_step"]
    assert effect["after"]["last_step"] - effect["after"]["first_step"] == steps - 1
    assert effect["before"]["tokens_per_s"] > 0 and effect["after"]["tokens_per_s"] > 0
    with Store(run.store, readonly=True) as store:
        events = store.events_since(0)
        lrs = {s.step: s.lr for s in store.steps()}
    message = next(e.message for e in events if e.type == "directive_effect")
    assert "loss slope" in message and "tokens/s" in message  # the console's timeline line
    if "lr_multiplier" in suggestion["allowed"]:  # applied at a step boundary: the next step's lr
        at = effect["applied_step"]
        ratio = suggestion["allowed"]["lr_multiplier"]
        assert lrs[at + 1] / lrs[at] == pytest.approx(ratio, rel=0.02)
