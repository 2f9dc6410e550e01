"""Chart series and text charts: pure functions."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from textual.content import Content

from memtui.console.chart import RESTART_MARK, render_chart, render_rule
from memtui.console.series import Point, downsample, restart_columns, within


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
    out = downsample(points, 10, 100)
    assert len(out) == 10 and [p.step for p in out] == list(range(10, 101, 10))
    assert out[0].tokens_per_s == 5.5 and out[0].mem_reserved == 1000 and out[1].mem_reserved == 20


def test_downsample_skips_nan_losses_and_marks_overflows() -> None:
    out = downsample([point(1, loss=math.nan, overflow=True), point(2, loss=3.0)], 1, 2)
    assert out[0].loss == 3.0 and out[0].overflow


def test_downsample_edges() -> None:
    assert downsample([point(1)], 0, 1) == [] and downsample([point(1)], 5, 0) == []
    assert [p.step for p in downsample([point(1), point(2), point(3)], 2, 2)] == [1, 3]  # more came


def test_downsample_keeps_a_resumed_attempts_repeated_steps_in_order() -> None:
    """Attempt 1 ran steps 1..100, attempt 2 resumed at 81 and ran to 150: 170 points in the
    order recorded, never a bucket across the restart, the restart's column marked."""
    points = [point(s) for s in range(1, 101)] + [point(s, attempt=2) for s in range(81, 151)]
    whole = downsample(points, 240, len(points))
    assert [p.step for p in whole] == [*range(1, 101), *range(81, 151)]
    thinned = downsample(points, 17, len(points))
    attempts = [p.attempt for p in thinned]
    assert attempts == sorted(attempts) and thinned[attempts.index(2) - 1].step == 100
    assert thinned[attempts.index(2)].step < 100 and thinned[-1].step == 150
    assert restart_columns(whole, 80) == [10] and restart_columns(whole, 70) == []  # 70 of attempt 2


@given(st.lists(st.integers(0, 10_000), max_size=300), st.integers(1, 300), st.integers(1, 3))
def test_downsample_never_exceeds_its_buckets_per_attempt(
    steps: list[int], buckets: int, attempts: int
) -> None:
    points = [point(s, attempt=1 + i * attempts // max(1, len(steps))) for i, s in enumerate(steps)]
    out = downsample(points, buckets, len(points))
    assert len(out) <= buckets + attempts - 1
    assert [p.attempt for p in out] == sorted(p.attempt for p in out)


def test_within_keeps_the_newest() -> None:
    assert [p.step for p in within([point(s) for s in range(10)], 9.0, 3.0)] == [6, 7, 8, 9]


def test_render_chart_shapes() -> None:
    assert render_chart([0, 4, 8], 5, 1) == ["   ▄█"]
    assert render_chart([8.0], 1, 2) == ["█", "█"] and render_chart([4.0], 1, 2, top=8.0) == [" ", "█"]
    assert render_chart([None, math.nan], 2, 1) == ["  "] and render_chart([1.0], 0, 1) == []
    assert render_chart([10.0, 20.0], 2, 1, bottom=10.0) == [" █"]


def test_render_rule_marks_restarts() -> None:
    plain = Content.from_markup(render_rule("tokens/s", 40, [30])).plain
    assert plain.startswith("tokens/s (↻ restart)─") and plain[30] == RESTART_MARK and len(plain) == 40
    assert Content.from_markup(render_rule("x", 5)).plain == "x────"
