"""Memory against capacity: bars, the allocator's gap, headroom, prediction and a history chart.

Says plainly when the numbers are a CPU stand-in. Fields a sample does not carry yet
(the device's own NVML "used", the memory model's prediction) show as a placeholder.
"""

from __future__ import annotations

from memtui.chart import render_chart
from memtui.formatting import PLACEHOLDER, format_bytes, format_percent
from memtui.run_view import RunView
from memtui.series import WINDOW_LABELS
from memtui.widgets.panel import Panel

KIND_LABELS: dict[str, str] = {
    "cuda": "CUDA device memory",
    "cpu-rss": "process RSS (CPU stand-in)",
}
CAPACITY_LABELS: dict[str, str] = {"cuda": "capacity", "cpu-rss": "budget"}
WARN_AT = 0.75
CRITICAL_AT = 0.90
LABEL_WIDTH = 10
FIGURES_WIDTH = 17  # " 1023.9 MiB  100%"
WIDE_AT = 60
"""Content width from which the longer explanations fit."""
TEXT_LINES = 5
"""Lines above the chart: three bars, gap/headroom, capacity/prediction."""


SHORT_KIND_LABELS: dict[str, str] = {"cuda": "CUDA", "cpu-rss": "RSS, CPU stand-in"}


def memory_title(view: RunView, width: int = WIDE_AT) -> str:
    kind = view.sample.mem_kind if view.sample else None
    labels = KIND_LABELS if width >= WIDE_AT - 16 else SHORT_KIND_LABELS
    return f"Memory · {labels[kind]}" if kind else "Memory"


def render_memory(view: RunView, width: int, height: int = TEXT_LINES, now: float = 0.0) -> str:
    """Bars ``width`` cells wide in all; a reserved-memory chart fills lines beyond the text."""
    s = view.sample
    if s is None:
        return "[$text-muted]waiting for the first step…[/]"
    capacity = s.mem_capacity or None
    bar_width = max(4, width - LABEL_WIDTH - FIGURES_WIDTH)
    lines = [
        _bar_line("allocated", s.mem_allocated, capacity, bar_width),
        _bar_line("reserved", s.mem_reserved, capacity, bar_width),
        _bar_line("peak", s.mem_peak, capacity, bar_width),
        _gap_line(
            s.mem_reserved - s.mem_allocated, None if capacity is None else capacity - s.mem_peak, width
        ),
        _capacity_line(view, capacity),
    ]
    chart_rows = height - len(lines) - 1
    if chart_rows >= 1:
        points = view.chart_points(now, width)
        label = f"reserved, {WINDOW_LABELS[view.window]}"
        lines.append(f"[$text-muted]{label[:width]:─<{width}}[/]")
        values = [float(p.mem_reserved) for p in points]
        rows = render_chart(values, width, chart_rows, top=float(capacity) if capacity else None)
        lines.extend(f"[$accent]{row}[/]" for row in rows)
    return "\n".join(lines)


def _gap_line(gap: int, headroom: int | None, width: int) -> str:
    """Reserved minus allocated (the allocator's cache) and capacity minus peak."""
    room_style = "$text-error" if headroom is not None and headroom <= 0 else "$text"
    explain = " [$text-muted](reserved−allocated)[/]" if width >= WIDE_AT else ""
    return (
        f"[$text-muted]{'gap':<{LABEL_WIDTH}}[/]{format_bytes(gap)}{explain}"
        f"  [$text-muted]headroom[/] [{room_style}]{format_bytes(headroom)}[/]"
    )


def _capacity_line(view: RunView, capacity: int | None) -> str:
    s = view.sample
    assert s is not None
    predicted = getattr(s, "mem_predicted", None)  # the Adaptive memory issue adds it
    device_used = getattr(s, "mem_device_used", None)  # NVML, CUDA only
    extra = (
        "  [$text-warning](not VRAM)[/]"
        if s.mem_kind == "cpu-rss"
        else f"  [$text-muted]device used[/] {format_bytes(device_used)}"
    )
    return (
        f"[$text-muted]{CAPACITY_LABELS[s.mem_kind]:<{LABEL_WIDTH}}[/]{format_bytes(capacity)}{extra}"
        f"  [$text-muted]predicted[/] {format_bytes(predicted) if predicted else PLACEHOLDER}"
    )


def _bar_line(label: str, used: int, capacity: int | None, width: int) -> str:
    fraction = min(1.0, used / capacity) if capacity else None
    figures = f"{format_bytes(used):>10} {format_percent(fraction):>6}"
    return f"[$text-muted]{label:<{LABEL_WIDTH}}[/]{render_bar(fraction, width)}{figures}"


def render_bar(fraction: float | None, width: int) -> str:
    """A bar of ``width`` cells, coloured by how full it is."""
    if fraction is None:
        return f"[$text-disabled]{'·' * width}[/]"
    filled = round(fraction * width)
    style = "$error" if fraction >= CRITICAL_AT else "$warning" if fraction >= WARN_AT else "$success"
    return f"[{style}]{'█' * filled}[/][$text-disabled]{'░' * (width - filled)}[/]"


class MemoryPanel(Panel):
    """Allocated, reserved and peak memory of the newest step, and reserved over time."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Memory", id=id)

    def draw(self, view: RunView, now: float) -> str:
        size = self.content_size
        self.border_title = memory_title(view, size.width)
        return render_memory(view, size.width, size.height, now)
