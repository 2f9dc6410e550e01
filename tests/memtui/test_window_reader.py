"""The longer chart windows over a resumed run: attempt 1 ran steps 1..100, attempt 2 resumed
from a checkpoint at step 80 and ran 81..150. Read by row order, both attempts' steps stay,
in the order they ran, and the charts mark the restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.content import Content

from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.console.app import MemtuiApp
from memtui.console.chart import RESTART_MARK
from memtui.console.history_view import stored_view
from memtui.console.widgets.memory_panel import MemoryPanel
from memtui.console.widgets.throughput_panel import ThroughputPanel
from memtui.console.window_reader import read_window
from memtui.history import stored_steps
from tests.fakes.run_script import make_sample
from tests.waiting import until

RESTART_TS = 2000.0
"""Attempt 2's first step finished here (attempt 1's last at 1100)."""


def resumed_run(store_path: Path) -> None:
    with Store(store_path) as store:
        for step in range(1, 101):
            store.add_step(make_sample(step, ts=1000.0 + step, tokens_per_s=1000.0))
        for step in range(81, 151):
            store.add_step(make_sample(step, ts=RESTART_TS + step - 81, attempt=2, tokens_per_s=3000.0))


@pytest.fixture
def resumed(run_dir: RunDir) -> RunDir:
    resumed_run(run_dir.store)
    return run_dir


def test_whole_run_keeps_both_attempts_in_the_order_they_ran(resumed: RunDir) -> None:
    points = read_window(resumed.store, "run", now=RESTART_TS + 100)
    assert [p.step for p in points] == [*range(1, 101), *range(81, 151)]
    assert [p.attempt for p in points] == [1] * 100 + [2] * 70
    assert {p.tokens_per_s for p in points[100:]} == {3000.0}  # attempt 2's own values


def test_downsampled_whole_run_never_mixes_the_attempts(resumed: RunDir) -> None:
    points = read_window(resumed.store, "run", now=RESTART_TS + 100, buckets=10)
    first = [p.attempt for p in points].index(2)
    assert points[first - 1].step == 100 and points[first].step < 100 and points[-1].step == 150
    assert all(p.tokens_per_s == (1000.0 if p.attempt == 1 else 3000.0) for p in points)


def test_last_hour_starts_at_the_first_step_inside_it(resumed: RunDir) -> None:
    now = RESTART_TS + 3600 + 9.5  # the hour began between attempt 2's steps 90 and 91
    points = read_window(resumed.store, "hour", now=now)
    assert [p.step for p in points] == list(range(91, 151))
    with Store(resumed.store, readonly=True) as store:
        assert store.count_steps(since_ts=now - 3600) == 60 and store.count_steps() == 170
        assert [s.step for s in store.iter_steps(7, since_ts=1095.0)][:7] == [95, 96, 97, 98, 99, 100, 81]
        assert store.count_steps(since_ts=1e12) == 0 and list(store.iter_steps(since_ts=1e12)) == []


def test_stored_steps_are_streamed_not_listed(resumed: RunDir) -> None:
    """The data layer hands out a count and a lazy stream (one keyset page in memory at a time)."""
    with stored_steps(resumed.store, since_ts=1095.0) as steps:
        assert steps.total == 6 + 70  # attempt 1's steps 95..100, then all of attempt 2
        assert isinstance(steps.samples, Iterator) and not isinstance(steps.samples, (list, tuple))
        assert [next(steps.samples).step for _ in range(7)] == [95, 96, 97, 98, 99, 100, 81]
    with stored_steps(resumed.path / "none.sqlite") as nothing:
        assert nothing.total == 0 and list(nothing.samples) == []


async def test_whole_run_chart_marks_the_restart(resumed: RunDir) -> None:
    app = MemtuiApp(resumed, live=False, view=stored_view(resumed), clock=lambda: RESTART_TS + 100)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("w", "w")  # live -> last hour -> whole run
        await until(lambda: app.view.window == "run" and app.view.window_points is not None)
        app.main.redraw()
        await pilot.pause()
        for panel in (app.query_one(ThroughputPanel), app.query_one(MemoryPanel)):
            assert panel.chart is not None
            rule, top_row, *_ = (Content.from_markup(line).plain for line in panel.chart.text.splitlines())
            assert "whole run" in rule and "(↻ restart)" in rule
            gutter = axis_gutter(rule, top_row)
            points = app.view.chart_points(0.0, len(rule) - gutter)  # all 170 steps across the plot
            # from the run's first steps (a bucket never spans the restart: a few more buckets
            # than columns, the oldest dropped) to its newest
            assert len(points) == len(rule) - gutter and points[0].step <= 10 and points[-1].step == 150
            restart = [p.attempt for p in points].index(2)
            assert points[restart - 1].step == 100
            column = gutter + restart  # marked over the chart (where the label leaves it free),
            if "flat at" not in rule:
                assert rule.index(RESTART_MARK, rule.index(")")) == column
            for row in panel.chart.text.splitlines()[1:]:  # and in the warning colour below it
                cells = Content.from_markup(row)
                assert [span.style for span in cells.spans if span.start == column] == ["$text-warning"]


def axis_gutter(rule: str, top_row: str) -> int:
    """Cells left of the plot: the y-axis label on the top row and a space (none when flat)."""
    if "flat at" in rule:
        return 0
    label = top_row.lstrip()
    return len(top_row) - len(label) + label.index(" ") + 1


def test_live_chart_marks_a_restart_too() -> None:
    from memtui.console.run_view import RunView
    from memtui.console.widgets.throughput_panel import render_throughput_chart

    view = RunView()
    for step in range(1, 101):
        view = view.with_sample(make_sample(step, ts=1000.0 + step))
    for step in range(81, 91):
        view = view.with_sample(make_sample(step, ts=1200.0 + step, attempt=2))
    assert [p.step for p in view.points[-12:]] == [99, 100, *range(81, 91)]
    rule, *rows = render_throughput_chart(view, 40, 3, now=1290.0).splitlines()
    assert Content.from_markup(rule).plain.startswith(
        "tokens/s, last 5 min, flat at 20.5k"
    )  # every step alike
    for row in rows:  # the label covers the restart's column: the chart's column is coloured
        cells = Content.from_markup(row)
        assert [span.style for span in cells.spans if span.start == 30] == ["$text-warning"]
