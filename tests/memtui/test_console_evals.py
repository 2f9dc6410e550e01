"""Evals in the console: the Numerics panel's eval line and the eval-loss chart beside the
train-loss one, against the real supervisor with the fake trainer, and cell for cell.

Update the snapshot after an intended change:
``pytest tests/memtui/test_console_evals.py --snapshot-update``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.events import EvalCompleted
from engine.run.storage.store import Store
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from memtui.console.run_view import MAX_EVENTS
from memtui.console.widgets.numerics_panel import NumericsPanel
from tests.live_supervisor import FAKE_TRAINER_ENV, LiveRun
from tests.memtui.console_harness import text_of
from tests.memtui.test_console_snapshot import LAST_STEP, NOW, figures_read, fixed_run
from tests.waiting import until


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times drawn in UTC, as the other snapshots'."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.slow
async def test_numerics_shows_the_fake_trainer_s_evals_through_the_real_supervisor(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {**FAKE_TRAINER_ENV, "FAKE_TRAINER_EVAL_EVERY": "20"}.items():
        monkeypatch.setenv(key, value)
    engine = LiveRun(home)
    try:
        await engine.start()
        app = MemtuiApp(engine.run)
        async with app.run_test(size=(160, 48)) as pilot:
            panel = app.query_one(NumericsPanel)
            await until(lambda: len(app.view.evals) >= 2, what="two evals in the console's view")
            app.main.redraw()
            await pilot.pause()
            shown = text_of(panel)
            eval_step = re.search(r"^eval +[0-9.]+ at step (\d+)$", shown, re.MULTILINE)
            assert eval_step is not None and int(eval_step[1]) % 20 == 0, shown  # the fake's evals
            assert "loss, last 5 min" in shown and "eval loss" in shown, shown  # the two charts
        status = engine.supervisor.status()
        assert status.last_eval is not None and status.last_eval.step % 20 == 0
        assert status.last_eval.metrics.keys() == {"accuracy"}
    finally:
        await engine.close()


def test_numerics_with_evals_snapshot(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]
    """120x36, the Numerics panel maximised: the newest eval's line, the train-loss chart and
    the eval-loss chart beside it (the held-out loss falling, then rising at the end)."""
    run = fixed_run(home)
    with Store(run.store) as store:
        for n, loss in enumerate([3.9, 3.4, 3.0, 2.8, 2.7, 2.75, 2.9]):
            step = 30 * (n + 1)
            done = EvalCompleted(step=step, loss=loss, batches=8, seconds=0.4, metrics={"accuracy": 0.1 * n})
            store.append_event(done.event_type, data=done.data(), attempt=1, message=f"eval at step {step}")
    app = MemtuiApp(run, live=False, view=stored_view(run), clock=lambda: NOW)
    assert app.view.evals[-1].step == 210 <= LAST_STEP

    async def numerics_maximised(pilot) -> None:  # type: ignore[no-untyped-def]
        await figures_read(pilot)
        pilot.app.query_one(NumericsPanel).focus()
        await pilot.press("z")

    assert snap_compare(app, terminal_size=(120, 36), run_before=numerics_maximised)


def test_a_run_read_back_charts_evals_older_than_its_newest_events(home: Path) -> None:
    """The view folds the newest MAX_EVENTS events; the eval chart still has every eval."""
    run = fixed_run(home)
    with Store(run.store) as store:
        for step in (30, 60):
            done = EvalCompleted(step=step, loss=3.0, batches=8, seconds=0.4)
            store.append_event(done.event_type, data=done.data(), attempt=1)
        for n in range(MAX_EVENTS):
            store.append_event("note", message=f"note {n}")
    assert [e.step for e in stored_view(run).evals] == [30, 60]
