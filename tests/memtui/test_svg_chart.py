"""A chart's y axis: a bound far above the rest (a CPU run's memory budget is the host's RAM)
is named in the legend, not drawn, so the memory it bounds is not a line on the floor."""

from __future__ import annotations

import re

from memtui.run_series import Point, RunSeries
from memtui.svg_chart import BOUND_ROOM, Chart, render_chart

GIB = 2**30
MEMORY = Chart("Memory", ("allocated", "reserved", "budget"), unit="bytes", bounds=("budget",))


def _run(budget: float) -> RunSeries:
    steps = range(1, 11)
    return RunSeries(
        start=0.0,
        end=10.0,
        steps_stored=10,
        series={
            "allocated": [Point(float(s), s, 0.1 * GIB + s * 2**20) for s in steps],
            "reserved": [Point(float(s), s, 0.2 * GIB) for s in steps],
            "budget": [Point(float(s), s, budget) for s in steps],
        },
        clock=[(float(s), s) for s in steps],
    )


def _y_labels(svg: str) -> list[str]:
    return re.findall(r'<text class="tick" x="\d+" y="[\d.]+" text-anchor="end">([^<]+)</text>', svg)


def test_a_budget_far_above_the_memory_is_named_and_left_off() -> None:
    svg = render_chart(_run(23.5 * GIB), MEMORY)
    assert 'data-series="budget"' not in svg and 'data-series="reserved"' in svg
    assert "budget 23.5 GiB, above the chart" in svg
    assert _y_labels(svg)[-1] == "204.8 MiB"  # 0.2 GiB: the axis tops out at reserved, not the budget


def test_a_budget_near_the_memory_sets_the_axis_and_is_drawn() -> None:
    svg = render_chart(_run(BOUND_ROOM * 0.2 * GIB * 0.9), MEMORY)
    assert 'data-series="budget"' in svg and "above the chart" not in svg
    assert _y_labels(svg)[-1] == "737.3 MiB"  # the budget is the highest value drawn
