"""Chart series and text charts: pure functions."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from memtui.chart import render_chart
from memtui.series import Point, downsample, within


def point(step: int, **over: object) -> Point:
    fields: dict[str, object] = dict(
        step=step,
        ts=float(step),
        tokens_per_s=100.0,
        step_time_s=0.1,
        loss=2.0,
        mem_allocated=10,
        mem_reserved=20,
    )
    fields.update(over)
    return Point(**fields)  # type: ignore[arg-type]


def test_downsample_means_rates_and_keeps_memory_peaks() -> None:
    points = [point(s, tokens_per_s=float(s), mem_reserved=1000 if s == 7 else 20) for s in range(1, 101)]
    out = downsample(points, 10, 1, 100)
    assert len(out) == 10 and [p.step for p in out] == list(range(10, 101, 10))
    assert out[0].tokens_per_s == 5.5 and out[0].mem_reserved == 1000 and out[1].mem_reserved == 20


def test_downsample_skips_nan_losses_and_marks_overflows() -> None:
    out = downsample([point(1, loss=math.nan, overflow=True), point(2, loss=3.0)], 1, 1, 2)
    assert out[0].loss == 3.0 and out[0].overflow


def test_downsample_edges() -> None:
    assert downsample([point(1)], 0, 1, 1) == [] and downsample([point(1)], 5, 3, 2) == []
    assert downsample([point(1), point(50)], 5, 10, 20) == []  # outside the range


@given(st.lists(st.integers(0, 10_000), max_size=300), st.integers(1, 300))
def test_downsample_never_exceeds_its_buckets(steps: list[int], buckets: int) -> None:
    out = downsample([point(s) for s in steps], buckets, 0, 10_000)
    assert len(out) <= buckets and [p.step for p in out] == sorted(p.step for p in out)


def test_within_keeps_the_newest() -> None:
    assert [p.step for p in within([point(s) for s in range(10)], 9.0, 3.0)] == [6, 7, 8, 9]


def test_render_chart_shapes() -> None:
    assert render_chart([0, 4, 8], 5, 1) == ["   ▄█"]
    assert render_chart([8.0], 1, 2) == ["█", "█"] and render_chart([4.0], 1, 2, top=8.0) == [" ", "█"]
    assert render_chart([None, math.nan], 2, 1) == ["  "] and render_chart([1.0], 0, 1) == []
    assert render_chart([10.0, 20.0], 2, 1, bottom=10.0) == [" █"]
