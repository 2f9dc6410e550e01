"""One chart of a run as inline SVG: some series over wall time (elapsed along the bottom
axis, the step reached along the top one), and the run's marks as vertical lines, each with
a ``<title>`` tooltip and ``data-seq``/``data-kind`` naming its event.

Pure: a ``RunSeries`` in, SVG text out; no plotting library, nothing fetched when the page
opens. Colours are CSS classes (``series-N``, ``mark-KIND``) that the page styles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from memtui.run_series import BUCKETS, Mark, Point, RunSeries

WIDTH, HEIGHT = 960, 240
"""The chart's box, in CSS pixels."""
LEFT, RIGHT, TOP, BOTTOM = 78, 16, 30, 30
"""Margins for the axes' labels, px."""
TICKS = 6
GAP_BUCKETS = 3
"""A pause longer than this many downsampling buckets, or this many times the median time
between two points, breaks a line (no step in between: an outage)."""


@dataclass(frozen=True)
class Chart:
    """Which series one chart draws and how its y axis reads."""

    title: str
    series: tuple[str, ...]
    unit: str = ""
    """``bytes``: the y labels in KiB/MiB/GiB."""
    log: bool = False
    """A log2 y axis (the fp16 loss scale moves in powers of two; a loss spike spans decades)."""
    dots: tuple[str, ...] = ()
    """Series drawn as dots too (a few points each, such as the evals)."""
    bounds: tuple[str, ...] = ()
    """Series that are a bound for the others (the memory budget): drawn where they fit, but
    left off, and named with their value in the legend, when they exceed the highest of the
    others by over ``BOUND_ROOM`` times (a CPU run's budget is the host's RAM, 23.5 GiB,
    over 0.1-0.4 GiB used, which drew the memory as a line on the floor)."""


BOUND_ROOM = 4.0
"""How many times the others' highest value a bound may be and still set the y axis."""


def elapsed(seconds: float, scale: float | None = None) -> str:
    """``42 s``, ``12.5 min``, ``3.20 h``: the unit that suits ``scale`` (default: ``seconds``),
    so that every label of one axis has the same unit."""
    scale = seconds if scale is None else scale
    if scale < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if scale < 7200 else f"{seconds / 3600:.2f} h"


def _number(value: float, unit: str) -> str:
    if unit == "bytes":
        for name, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(value) >= size:
                return f"{value / size:.1f} {name}"
        return f"{value:.0f} B"
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


class _Frame:
    """Maps (time, value) to pixels for one chart."""

    def __init__(self, run: RunSeries, low: float, high: float, log: bool) -> None:
        self.run, self.log = run, log
        self.low, self.high = (self._y(low), self._y(high)) if log else (low, high)
        if self.high - self.low <= 1e-9 * max(abs(self.high), 1.0):  # a flat series: centre it
            pad = 0.05 * abs(self.high) or 0.5
            self.low, self.high = self.low - pad, self.high + pad
        self.span = max(run.end - run.start, 1e-9)

    def _y(self, value: float) -> float:
        return math.log2(max(value, 1e-300)) if self.log else value

    def x(self, ts: float) -> float:
        return LEFT + (ts - self.run.start) / self.span * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        share = (self._y(value) - self.low) / (self.high - self.low)
        return HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM)

    def value_at(self, share: float) -> float:
        raw = self.low + share * (self.high - self.low)
        return 2**raw if self.log else raw


def render_chart(run: RunSeries, chart: Chart) -> str:
    """The chart as one ``<svg>`` element (an empty frame when it has no point)."""
    drawn = {name: run.series.get(name, []) for name in chart.series}
    above = _bounds_above(chart, drawn)
    values = [
        p.value
        for name, points in drawn.items()
        if name not in above
        for p in points
        if math.isfinite(p.value) and (p.value > 0 or not chart.log)
    ]
    frame = _Frame(run, min(values, default=0.0), max(values, default=1.0), chart.log)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(chart.title)}" xmlns="http://www.w3.org/2000/svg">',
        *_axes(frame, chart),
        *(
            _line(frame, name, i, points, name in chart.dots)
            for i, (name, points) in enumerate(drawn.items())
            if name not in above
        ),
        _marks(frame, run.marks),
        _legend(chart, above),
        "</svg>",
    ]
    return "\n".join(parts)


def _bounds_above(chart: Chart, drawn: dict[str, list[Point]]) -> dict[str, float]:
    """The chart's bounds too high to share the others' axis, with their highest value."""

    def highest(names: list[str]) -> float:
        return max((p.value for n in names for p in drawn[n] if math.isfinite(p.value)), default=0.0)

    others = highest([n for n in drawn if n not in chart.bounds])
    if others <= 0:
        return {}
    tops = {name: highest([name]) for name in chart.bounds if name in drawn}
    return {name: top for name, top in tops.items() if top > BOUND_ROOM * others}


def _axes(frame: _Frame, chart: Chart) -> list[str]:
    """Box, y labels, elapsed time below and the step reached above, at TICKS ticks."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>']
    for i in range(TICKS + 1):
        share = i / TICKS
        anchor = "start" if i == 0 else "end" if i == TICKS else "middle"
        y = HEIGHT - BOTTOM - share * plot_h
        label = _number(frame.value_at(share), chart.unit)
        out.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
        x = LEFT + share * plot_w
        ts = frame.run.start + share * frame.span
        out.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - 10}" text-anchor="{anchor}">'
                   f"{elapsed(ts - frame.run.start, frame.span)}</text>")  # fmt: skip
        out.append(f'<text class="tick step" x="{x:.1f}" y="{TOP - 6}" text-anchor="{anchor}">'
                   f"step {frame.run.step_at(ts):,}</text>")  # fmt: skip
    return out


def _line(frame: _Frame, name: str, index: int, points: list[Point], dots: bool) -> str:
    """A polyline per unbroken stretch of finite points: a stretch ends where the step goes
    back (a restart's replay) or time jumps by over GAP_BUCKETS buckets (an outage)."""
    drawn = [p for p in points if math.isfinite(p.value) and (p.value > 0 or not frame.log)]
    if not drawn:
        return ""
    gaps = sorted(b.ts - a.ts for a, b in zip(drawn, drawn[1:]))  # noqa: B905 (one shorter)
    gap = max(GAP_BUCKETS * frame.span / BUCKETS, GAP_BUCKETS * (gaps[len(gaps) // 2] if gaps else 0.0))
    stretches: list[list[str]] = [[]]
    for i, p in enumerate(drawn):
        before = drawn[i - 1]
        if i and (p.step < before.step or p.ts - before.ts > gap):
            stretches.append([])
        stretches[-1].append(f"{frame.x(p.ts):.1f},{frame.y(p.value):.1f}")
    body = "".join(f'<polyline points="{" ".join(s)}"/>' for s in stretches)
    if dots:
        body += "".join(
            f'<circle cx="{c.split(",")[0]}" cy="{c.split(",")[1]}" r="3"/>' for s in stretches for c in s
        )
    return f'<g class="series series-{index}" data-series="{escape(name)}">{body}</g>'


def _marks(frame: _Frame, marks: list[Mark]) -> str:
    """One vertical line per mark, its tooltip naming the kind, step, time and message."""
    lines = []
    for mark in marks:
        x = frame.x(mark.ts)
        title = f"{mark.kind} at step {mark.step:,}, {elapsed(mark.ts - frame.run.start)}: {mark.text}"
        lines.append(
            f'<line class="mark mark-{mark.kind}" data-seq="{mark.seq}" data-kind="{mark.kind}" '
            f'x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}">'
            f"<title>{escape(title)}</title></line>"
        )
    return '<g class="marks">' + "".join(lines) + "</g>"


def _legend(chart: Chart, above: dict[str, float]) -> str:
    """The series' names; a bound left off the chart says its value and that it is above."""
    items, x = [], LEFT + 8
    for i, name in enumerate(chart.series):
        label = f"{name} {_number(above[name], chart.unit)}, above the chart" if name in above else name
        items.append(f'<text class="legend series-{i}" x="{x}" y="{TOP + 16}">&#9632; {escape(label)}</text>')
        x += max(130, 8 * len(label) + 24)  # px: a long label pushes the next one along
    return "".join(items)
