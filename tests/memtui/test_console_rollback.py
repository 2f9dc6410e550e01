"""The console's rollback: the palette offers the tags saved before the newest step, and
choosing one asks, then proposes the rollback (tag and skip) to the engine."""

from __future__ import annotations

import pytest

from engine.events import CheckpointSaved
from engine.run.directory import RunDir
from engine.wire.protocol import Propose
from memtui.console.app import MemtuiApp
from memtui.console.screens.confirm_screen import ConfirmScreen
from tests.fakes.run_script import make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.waiting import until


def saved(step: int) -> CheckpointSaved:
    return CheckpointSaved(
        step=step,
        tag=f"global_step{step}",
        seconds=0.1,
        write_s=0.1,
        seal_s=0.0,
        background=False,
        size_bytes=1,
    )


@pytest.fixture
async def fake(live_run: RunDir):  # type: ignore[no-untyped-def]
    events = [make_event(n, saved(step)) for n, step in enumerate((20, 40, 60), start=1)]
    stream = telemetry([make_sample(50)])
    async with ScriptedEngine(
        live_run.socket, welcome_for(live_run.run_id), events=events, stream=stream
    ) as engine:
        yield engine


async def test_the_palette_proposes_a_rollback_to_a_saved_tag(live_run: RunDir, fake: ScriptedEngine) -> None:
    app = MemtuiApp(live_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(lambda: app.view.connection == "connected" and app.view.step == 50 and app.view.events)
        offered = [
            action for _title, _help, action in app.palette_commands() if action.startswith("roll_back")
        ]
        assert offered == ["roll_back('global_step40', 10)", "roll_back('global_step20', 30)"]  # 60 is ahead
        await app.run_action(offered[0])
        await until(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        await pilot.press("y")
        await until(lambda: any(isinstance(m, Propose) for m in fake.requests), what="the proposal")
        [proposal] = [m for m in fake.requests if isinstance(m, Propose)]
        assert proposal.values == {"rollback": {"tag": "global_step40", "skip_batches": 10}}
