"""The Metrics panel: the workload's own scalars, a row each (name, newest value, sparkline);
what it says for a run with none; narrow at 80x24; downsampled windows keep each metric's
mean; and the console against the real supervisor shows the fake trainer's metric."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.alerts import watch as alert_watch
from memtui.console.app import MemtuiApp
from memtui.console.series import Point, downsample
from memtui.console.widgets.metrics_panel import MetricsPanel, render_metrics, sparkline
from tests.cli_harness import CHECKOUT
from tests.live_supervisor import FAKE_TRAINER_ENV, LiveRun
from tests.memtui.console_harness import text_of
from tests.waiting import until


def point(step: int, metrics: dict[str, float] | None) -> Point:
    return Point(
        step=step,
        ts=float(step),
        tokens_per_s=1.0,
        step_time_s=1.0,
        loss=1.0,
        mem_allocated=0,
        mem_reserved=0,
        metrics=metrics,
    )


def plain(markup: str) -> str:
    from textual.content import Content

    return "\n".join(Content.from_markup(line).plain for line in markup.splitlines())


def test_a_run_without_metrics_says_how_a_workload_reports_one() -> None:
    text = plain(render_metrics([point(1, None), point(2, None)], 34))
    assert "none yet" in text and "(loss, {name: value})" in text


def test_each_metric_has_its_row_with_the_newest_value_and_a_sparkline() -> None:
    points = [point(s, {"accuracy": s / 10, **({"ppl": 50.0 / s} if s % 2 else {})}) for s in range(1, 9)]
    rows = plain(render_metrics(points, 34)).splitlines()
    assert [r.split()[:2] for r in rows] == [["accuracy", "0.8"], ["ppl", "7.143"]]  # ppl of step 7
    assert all(len(r) <= 34 for r in rows)
    assert rows[0].endswith(sparkline(points, "accuracy", 34 - 8 - 5 - 2))
    assert sparkline(points, "accuracy", 8)[-1] == "█" and sparkline(points, "ppl", 8)[-1] == " "


def test_narrow_panels_cut_long_names_and_keep_a_sparkline() -> None:
    name = "validation.token_accuracy_top5"
    (row,) = plain(render_metrics([point(1, {name: 0.5}), point(2, {name: 0.75})], 23)).splitlines()
    assert row.startswith("validation.t…") and len(row) == 23 and row.endswith(" ▄█")


def test_a_downsampled_window_keeps_each_metrics_mean() -> None:
    points = [point(s, {"accuracy": float(s)} if s != 2 else None) for s in range(1, 5)]
    (bucket,) = downsample(points, 1, 4)
    assert bucket.metrics == {"accuracy": (1 + 3 + 4) / 3}


@pytest.fixture
async def real_run(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LiveRun]:
    """The real supervisor running the fake trainer (which reports ``accuracy``)."""
    for name, value in FAKE_TRAINER_ENV.items():
        monkeypatch.setenv(name, value)
    # the fake trainer is a script: this checkout's engine first, not an installed one
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(alert_watch, "FIRST_DOCTOR_S", 3600.0)
    engine = LiveRun(Path(tempfile.mkdtemp(prefix="mtm", dir="/tmp")))
    try:
        await engine.start()
        yield engine
    finally:
        await engine.close()


@pytest.mark.slow
async def test_the_console_shows_the_fake_trainers_metric_from_the_real_supervisor(
    real_run: LiveRun,
) -> None:
    app = MemtuiApp(real_run.run)
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(MetricsPanel)
        await until(
            lambda: "accuracy" in text_of(panel),
            what="accuracy in the Metrics panel",
            seen=lambda: (app.view.state, [e.message for e in app.view.events][-3:]),
        )
        assert panel.region.width > 0 and panel.region.height > 0  # on screen at 80x24
        await pilot.press("q")
