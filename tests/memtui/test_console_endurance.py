"""The console's run-wide figures and endurance screen, read from the store: the throughput
panel shows the whole run's tokens/s beside the attempt's, and key E opens the report."""

from __future__ import annotations

from engine.events import ChaosInjected, ChaosRecovered
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from memtui.console.screens.endurance_screen import EnduranceScreen
from memtui.console.widgets.throughput_panel import ThroughputPanel
from tests.fakes.run_script import make_sample
from tests.memtui.console_harness import text_of
from tests.waiting import until


def _two_attempts(run: RunDir) -> None:
    with Store(run.store) as store:
        for attempt, steps in ((1, range(1, 31)), (2, range(21, 61))):
            for step in steps:
                store.add_step(make_sample(step, attempt=attempt))
        for payload in (
            ChaosInjected(chaos_id="c1", kind="kill", step=30),
            ChaosRecovered(chaos_id="c1", kind="kill", recovered=True, seconds=1.5, step=21),
        ):
            store.append_event(payload.event_type, data=payload.model_dump(mode="json"))
        store.update_meta(state="stopped", attempt=2)


async def test_run_wide_figures_and_the_endurance_screen(run_dir: RunDir) -> None:
    _two_attempts(run_dir)
    app = MemtuiApp(run_dir, live=False, view=stored_view(run_dir))
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.query_one(ThroughputPanel)
        await until(lambda: "(run)" in text_of(panel), what="the run-wide tokens/s")
        assert "attempt 2 avg" in text_of(panel)
        assert app.view.run_throughput is not None and app.view.run_throughput.steps == 70
        await pilot.press("E")
        await until(lambda: isinstance(app.screen, EnduranceScreen) and app.screen.report is not None)
        screen = app.screen
        assert isinstance(screen, EnduranceScreen) and screen.report is not None
        assert screen.report.steps_sustained == 60 and screen.report.chaos["kill"].recovered == 1
        shown = text_of(screen.query_one("#endurance-figures"))
        assert "steps sustained / target" in shown and "60 / 100" in shown and "kill" in shown
        await pilot.press("escape")
        await until(lambda: not isinstance(app.screen, EnduranceScreen))
