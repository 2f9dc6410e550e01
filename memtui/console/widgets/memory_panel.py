"""Memory against capacity: bars, the allocator's gap, headroom, the step's measured peak
beside the memory model's prediction, the batch geometry and its newest adaptation, one row
per rank (several ranks), and a history chart.

Per-rank rows (like nvitop's per-device rows) come from the newest rank report, which the
trainer's ranks exchange every few steps: a stacked bar (allocated, then reserved's cached
gap, against the rank's capacity), reserved, the rank's peak and its gap. Where the panel has
no room for the rows (the compact layout) one line names the worst rank, the one with the
least headroom; a single-rank run shows no rank rows at all.

Says plainly when the numbers are a CPU stand-in. Fields a sample does not carry
(the device's own NVML "used", a prediction when adaptive memory is off) show as a placeholder.
"""

from __future__ import annotations

from textual.markup import escape

from engine.domain import Event, MemoryLevel, RankMemory, TelemetrySample, Thresholds, slowest_rank
from engine.events import MemoryAdapted
from memtui.console.chart import render_scaled
from memtui.console.run_view import RunView
from memtui.console.series import WINDOW_LABELS, restart_columns
from memtui.console.widgets.memory_breakdown import render_breakdown
from memtui.console.widgets.panel import Panel
from memtui.formatting import PLACEHOLDER, format_bytes, format_percent

KIND_LABELS: dict[str, str] = {
    "cuda": "CUDA device memory",
    "cpu-rss": "process RSS (CPU stand-in)",
}
CAPACITY_LABELS: dict[str, str] = {"cuda": "capacity", "cpu-rss": "budget"}
LEVEL_STYLES: dict[MemoryLevel, str] = {"ok": "$success", "warn": "$warning", "critical": "$error"}
"""Bar colour by memory level (the levels are the run's ``memory.warn`` and ``memory.critical``)."""
LABEL_WIDTH = 10
FIGURES_WIDTH = 17  # " 1023.9 MiB  100%"
WIDE_AT = 60
"""Content width from which the longer explanations fit."""
TEXT_LINES = 7
"""Lines of figures: three bars, gap, capacity, prediction, geometry."""
PREDICTION_OFF_AT = 0.15
"""A measured peak this far (as a fraction) from the prediction is flagged."""


RANK_LABEL_WIDTH = 5  # "r0".."r999", a space
RANK_FIGURES_WIDTH = 14  # " 1023 MiB  78%": reserved and its share of capacity
RANK_COLUMN_WIDTH = 10  # " 1023.9 MiB": peak, gap
RANK_STEP_WIDTH = 10  # "  0.312s ◀": the rank's own step time, the slowest rank marked
SLOWEST_MARK = "◀"
RANK_BAR_MIN = 8
"""Narrowest rank bar: below it the gap column, then the peak column, give way."""
CHART_MIN_LINES = 3
"""Lines the history chart keeps (its label and two rows) before rank rows give way to it."""

SHORT_KIND_LABELS: dict[str, str] = {"cuda": "CUDA", "cpu-rss": "RSS, CPU stand-in"}


def memory_title(view: RunView, width: int = WIDE_AT) -> str:
    """The panel's border title for a panel ``width`` cells wide: what the numbers measure
    and, with several ranks, how many and from which step their last report is."""
    kind = view.sample.mem_kind if view.sample else None
    if not kind:
        return "Memory"
    ranks = f" · {len(view.ranks)} ranks" if view.ranks else ""
    step = view.sample.step if view.sample else None
    if ranks and view.ranks_step is not None and step is not None and view.ranks_step < step:
        ranks += f" at step {view.ranks_step}"  # the ranks report every few steps: say how old
    room = width - 6  # the border's corners and the title's padding
    long = f"Memory · {KIND_LABELS[kind]}{ranks}"
    if width >= WIDE_AT - 16 and len(long) <= room:
        return long
    return f"Memory · {SHORT_KIND_LABELS[kind]}{ranks}"


def render_memory(view: RunView, width: int, height: int = TEXT_LINES) -> str:
    """Bars ``width`` cells wide in all, then the gap, capacity, prediction and geometry lines;
    under ``TEXT_LINES`` lines high (the compact layout) the geometry joins the prediction line.

    With several ranks: one row per rank under them, as many as leave the chart
    CHART_MIN_LINES of ``height`` (the worst ones first when not all fit); in the compact
    layout the worst rank's line takes the prediction line's place."""
    s = view.sample
    if s is None:
        phase = view.startup_phase
        doing = f": {escape(phase.label())}" if phase is not None else ""
        return f"[$text-muted]waiting for the first step{doing}…[/]"
    lines = _figure_lines(view, width, height)
    if not view.ranks:
        return "\n".join(lines)
    if height < TEXT_LINES:
        return "\n".join([*lines[:-1], render_worst_rank(view.ranks, width, view.thresholds)])
    table = height - TEXT_LINES - CHART_MIN_LINES  # lines for the header and rank rows
    if table < 2:
        return "\n".join([*lines, render_worst_rank(view.ranks, width, view.thresholds)])
    return "\n".join([*lines, *render_rank_rows(view.ranks, width, table, view.thresholds)])


def _figure_lines(view: RunView, width: int, height: int) -> list[str]:
    s = view.sample
    assert s is not None
    capacity = s.mem_capacity or None
    bar_width = max(4, width - LABEL_WIDTH - FIGURES_WIDTH)
    levels = view.thresholds
    lines: list[str] = [
        _bar_line("allocated", s.mem_allocated, capacity, bar_width, _level(s, s.mem_allocated, levels)),
        _bar_line("reserved", s.mem_reserved, capacity, bar_width, _level(s, s.mem_reserved, levels)),
        _bar_line("peak", s.mem_peak, capacity, bar_width, _level(s, s.mem_peak, levels))
        if s.mem_kind != "cpu-rss"
        else _of_peak_line(s.mem_reserved, s.mem_process_peak or s.mem_peak, bar_width),
        _gap_line(s, None if capacity is None else capacity - s.mem_peak, width),
        _capacity_line(view, capacity),
        _prediction_line(s.mem_step_peak, s.mem_predicted),
    ]
    if height < TEXT_LINES:
        lines[-1] += f"  [$text-muted]batch[/] {s.micro_batch}×{s.grad_accum}"
    else:
        lines.append(_geometry_line(view))
    breakdown = render_breakdown(view, width)
    if breakdown is not None and not view.ranks and height >= TEXT_LINES + 1 + CHART_MIN_LINES:
        lines.append(breakdown)
    return lines


def worst_rank(ranks: tuple[RankMemory, ...]) -> RankMemory:
    """The rank with the least headroom: highest peak over capacity (then reserved)."""
    return max(ranks, key=lambda r: (_fraction(r.peak, r.capacity), r.reserved, -r.rank))


def render_rank_rows(
    ranks: tuple[RankMemory, ...], width: int, limit: int, thresholds: Thresholds
) -> list[str]:
    """A column header and up to ``limit - 1`` rank rows, rank order; when not all fit, the
    worst ranks are the ones shown and the header says how many are not."""
    slow = slowest_rank(ranks)
    timed = slow is not None
    bar, peak, gap = _rank_columns(width - (RANK_STEP_WIDTH if timed else 0))
    shown = ranks
    if len(ranks) > limit - 1:
        kept = sorted(ranks, key=lambda r: (_fraction(r.peak, r.capacity), r.reserved), reverse=True)
        shown = tuple(sorted(kept[: max(1, limit - 1)], key=lambda r: r.rank))
    hidden = len(ranks) - len(shown)
    legend = f"+{hidden} more ranks" if hidden else "█alloc ▒gap"  # what is missing matters more
    header = (
        f"{'rank':<{RANK_LABEL_WIDTH}}{legend[:bar]:<{bar}}{'reserved':>{RANK_FIGURES_WIDTH}}"
        + (f"{'peak':>{RANK_COLUMN_WIDTH}}" if peak else "")
        + (f"{'gap':>{RANK_COLUMN_WIDTH}}" if gap else "")
        + (f"{'step':>{RANK_STEP_WIDTH - 2}}" if timed else "")
    )
    worst = worst_rank(ranks).rank
    rows = (
        _rank_row(r, bar, peak, gap, r.rank == worst, thresholds) + (_rank_pace(r, slow) if timed else "")
        for r in shown
    )
    return [f"[$text-muted]{header}[/]", *rows]


def _rank_pace(r: RankMemory, slowest: RankMemory | None) -> str:
    """The rank's own seconds per step; the slowest one's in the warning colour, marked."""
    if r.step_s is None:
        return f"{PLACEHOLDER:>{RANK_STEP_WIDTH - 2}}  "
    figure = f"{r.step_s:.3f}s"
    if slowest is not None and r.rank == slowest.rank:
        return f"[$text-warning]{figure:>{RANK_STEP_WIDTH - 2}} {SLOWEST_MARK}[/]"
    return f"{figure:>{RANK_STEP_WIDTH - 2}}  "


def render_worst_rank(ranks: tuple[RankMemory, ...], width: int, thresholds: Thresholds) -> str:
    """One line for all ranks: how many, and the worst one's bar, reserved and share."""
    r = worst_rank(ranks)
    label = f"{len(ranks)} ranks"
    slow = slowest_rank(ranks)
    pace = f"slow r{slow.rank} " if slow is not None else ""  # the rank the others wait for
    lead = f"{label:<{LABEL_WIDTH}}{pace}worst r{r.rank} "
    bar = max(2, width - len(lead) - RANK_FIGURES_WIDTH)  # 3 cells in the 80x24 layout
    return (
        f"[$text-muted]{lead}[/]"
        + render_stacked_bar(r.allocated, r.reserved, r.capacity, bar, thresholds)
        + _rank_figures(r)
    )


def _rank_columns(width: int) -> tuple[int, bool, bool]:
    """(bar cells, show peak, show gap) for rank rows ``width`` cells wide."""
    fixed = RANK_LABEL_WIDTH + RANK_FIGURES_WIDTH
    for peak, gap in ((True, True), (True, False), (False, False)):
        bar = width - fixed - RANK_COLUMN_WIDTH * (peak + gap)
        if bar >= RANK_BAR_MIN:
            return bar, peak, gap
    return max(4, width - fixed), False, False


def _rank_row(r: RankMemory, bar: int, peak: bool, gap: bool, worst: bool, thresholds: Thresholds) -> str:
    label_style = "$text-warning" if worst else "$text-muted"
    return (
        f"[{label_style}]{f'r{r.rank}':<{RANK_LABEL_WIDTH}}[/]"
        + render_stacked_bar(r.allocated, r.reserved, r.capacity, bar, thresholds)
        + _rank_figures(r)
        + (f"{format_bytes(r.peak):>{RANK_COLUMN_WIDTH}}" if peak else "")
        + (f"{format_bytes(r.reserved - r.allocated):>{RANK_COLUMN_WIDTH}}" if gap else "")
    )


def _rank_figures(r: RankMemory) -> str:
    share = _fraction(r.reserved, r.capacity) if r.capacity else None
    percent = PLACEHOLDER if share is None else f"{share:.0%}"
    return f"{format_bytes(r.reserved):>9}{percent:>5}"


def _fraction(used: int, capacity: int) -> float:
    return used / capacity if capacity else 0.0


def render_stacked_bar(
    allocated: int, reserved: int, capacity: int, width: int, thresholds: Thresholds
) -> str:
    """``width`` cells: allocated (█), then reserved's cached gap (▒), then free (░), against
    ``capacity``, coloured by how full reserved is against the run's memory levels."""
    if not capacity:
        return f"[$text-disabled]{'·' * width}[/]"
    used = round(min(1.0, allocated / capacity) * width)
    held = max(used, round(min(1.0, reserved / capacity) * width))
    style = LEVEL_STYLES[thresholds.memory_level(reserved / capacity)]
    return f"[{style}]{'█' * used}{'▒' * (held - used)}[/][$text-disabled]{'░' * (width - held)}[/]"


def render_memory_chart(view: RunView, width: int, height: int, now: float) -> str:
    """A labelled chart of reserved memory over the chosen window, ``height`` lines in all,
    scaled to the data's own range (on a CPU the process uses a sliver of its budget: against
    capacity the chart would be one flat row); the bars above say how full it is."""
    if view.sample is None:
        return ""
    label = f"reserved, {WINDOW_LABELS[view.window]}"

    def series(plot: int) -> tuple[list[float], list[int]]:
        points = view.chart_points(now, plot)
        return [float(p.mem_reserved) for p in points], restart_columns(points, plot)

    return render_scaled(label, series, width, height, style="$accent", fmt=_axis_bytes)


def _axis_bytes(n: float) -> str:
    """A y-axis label: bytes without the space (``1.50GiB``), a gutter is narrow."""
    return format_bytes(n).replace(" ", "")


def _prediction_line(measured: int | None, predicted: int | None) -> str:
    """The step's measured peak beside the memory model's prediction for this geometry."""
    error = ""
    if measured and predicted:
        off = (measured - predicted) / predicted
        style = "$text-warning" if abs(off) >= PREDICTION_OFF_AT else "$text-muted"
        error = f" [{style}]({off:+.0%})[/]"
    return (
        f"[$text-muted]{'step peak':<{LABEL_WIDTH}}[/]{format_bytes(measured) if measured else PLACEHOLDER}"
        f"  [$text-muted]predicted[/] {format_bytes(predicted) if predicted else PLACEHOLDER}{error}"
    )


def _geometry_line(view: RunView) -> str:
    """Micro-batch x grad-accum (x ranks), and the memory controller's newest change."""
    s = view.sample
    assert s is not None
    ranks = f" × {s.world_size} ranks" if s.world_size > 1 else ""
    line = f"[$text-muted]{'batch':<{LABEL_WIDTH}}[/]{s.micro_batch} × {s.grad_accum} accum{ranks}"
    adapted = view.last_adaptation
    if adapted is not None:
        line += f"  [$text-muted]adapted[/] {escape(render_adaptation(adapted))}"
    return line


def render_adaptation(event: Event) -> str:
    """``16→8 at step 120 (shrink: reason)`` from a ``memory_adapted`` event."""
    adapted = MemoryAdapted.of(event)
    if adapted is None:
        return escape(event.message) or "?"
    why = ": ".join(part for part in (adapted.kind, adapted.reason) if part)
    change = f"{adapted.from_micro_batch}→{adapted.to_micro_batch} at step {adapted.step}"
    return change + (f" ({why})" if why else "")


def _gap_line(s: TelemetrySample, headroom: int | None, width: int) -> str:
    """Reserved minus allocated (the allocator's cache), the fragmented part of it (CUDA: not
    freeable, counted by the budget's cap), and capacity minus peak."""
    room_style = "$text-error" if headroom is not None and headroom <= 0 else "$text"
    explain = " [$text-muted](reserved−allocated)[/]" if width >= WIDE_AT else ""
    fragmented = s.mem_fragmentation
    if fragmented is not None:
        share = f" ({fragmented / s.mem_reserved:.0%} of reserved)" if s.mem_reserved > 0 else ""
        explain = f"  [$text-muted]fragmented[/] {format_bytes(fragmented)}{share}"
    return (
        f"[$text-muted]{'gap':<{LABEL_WIDTH}}[/]{format_bytes(s.mem_reserved - s.mem_allocated)}{explain}"
        f"  [$text-muted]headroom[/] [{room_style}]{format_bytes(headroom)}[/]"
    )


def _capacity_line(view: RunView, capacity: int | None) -> str:
    """Capacity (a CPU stand-in says so), the controller's budget when set, NVML's "used"."""
    s = view.sample
    assert s is not None
    budget = (
        f"  [$text-muted]budget[/] {format_bytes(s.mem_budget)}"
        if s.mem_budget and (s.mem_kind != "cpu-rss" or s.mem_budget != capacity)
        else ""
    )
    extra = (
        "  [$text-warning](not VRAM)[/]"
        if s.mem_kind == "cpu-rss"
        else f"  [$text-muted]device used[/] {format_bytes(s.mem_device_used)}"
    )
    label = CAPACITY_LABELS[s.mem_kind]
    return f"[$text-muted]{label:<{LABEL_WIDTH}}[/]{format_bytes(capacity)}{budget}{extra}"


def _level(s: TelemetrySample, used: int, thresholds: Thresholds) -> MemoryLevel:
    """``used`` bytes' level as the run's memory controller judges it: a share of the usable
    room under the budget (budget minus the baseline no micro-batch changes), so the colour
    turns where the controller acts; without a budget, a share of capacity."""
    limit = s.mem_budget or s.mem_capacity
    return thresholds.room_level(used, limit, s.mem_baseline if s.mem_budget else None)


def _bar_line(label: str, used: int, capacity: int | None, width: int, level: MemoryLevel) -> str:
    """A bar of ``used`` against ``capacity`` in the colour of ``level``, then the figures."""
    fraction = min(1.0, used / capacity) if capacity else None
    figures = f"{format_bytes(used):>10} {format_percent(fraction):>6}"
    return f"[$text-muted]{label:<{LABEL_WIDTH}}[/]{_level_bar(fraction, width, level)}{figures}"


def _level_bar(fraction: float | None, width: int, level: MemoryLevel) -> str:
    if fraction is None:
        return f"[$text-disabled]{'·' * width}[/]"
    filled = round(fraction * width)
    return f"[{LEVEL_STYLES[level]}]{'█' * filled}[/][$text-disabled]{'░' * (width - filled)}[/]"


def _of_peak_line(reserved: int, peak: int, width: int) -> str:
    """On a CPU the process holds a sliver of its budget and the bars above barely move: this
    one is reserved against the process's own high-water mark (``mem_process_peak``; the
    step's peak is on the step peak line), its bytes and reserved's share of it."""
    fraction = min(1.0, reserved / peak) if peak else None
    filled = round((fraction or 0.0) * width)  # near its own peak is normal: no level colours
    bar = f"[$accent]{'█' * filled}[/][$text-disabled]{'░' * (width - filled)}[/]"
    figures = f"{format_bytes(peak):>10} {format_percent(fraction):>6}"
    return f"[$text-muted]{'of peak':<{LABEL_WIDTH}}[/]{bar}{figures}"


class MemoryPanel(Panel):
    """Allocated, reserved and peak memory of the newest step, and reserved over time."""

    HAS_CHART = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Memory", id=id)

    def draw(self, view: RunView, now: float) -> str:
        size = self.content_size
        self.border_title = memory_title(view, size.width)
        return render_memory(view, size.width, size.height)

    def draw_chart(self, view: RunView, now: float, width: int, height: int) -> str:
        return render_memory_chart(view, width, height, now)
