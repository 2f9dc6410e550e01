"""Memory against capacity: bars, the allocator's gap, headroom, the step's measured peak
beside the memory model's prediction, the batch geometry and its newest adaptation, and a
history chart.

Says plainly when the numbers are a CPU stand-in. Fields a sample does not carry
(the device's own NVML "used", a prediction when adaptive memory is off) show as a placeholder.
"""

from __future__ import annotations

from textual.markup import escape

from engine.domain import Event
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
TEXT_LINES = 7
"""Lines of figures: three bars, gap, capacity, prediction, geometry."""
PREDICTION_OFF_AT = 0.15
"""A measured peak this far (as a fraction) from the prediction is flagged."""


SHORT_KIND_LABELS: dict[str, str] = {"cuda": "CUDA", "cpu-rss": "RSS, CPU stand-in"}


def memory_title(view: RunView, width: int = WIDE_AT) -> str:
    kind = view.sample.mem_kind if view.sample else None
    labels = KIND_LABELS if width >= WIDE_AT - 16 else SHORT_KIND_LABELS
    return f"Memory · {labels[kind]}" if kind else "Memory"


def render_memory(view: RunView, width: int, height: int = TEXT_LINES) -> str:
    """Bars ``width`` cells wide in all, then the gap, capacity, prediction and geometry lines;
    under ``TEXT_LINES`` lines high (the compact layout) the geometry joins the prediction line."""
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
        _prediction_line(s.mem_step_peak, s.mem_predicted),
    ]
    if height < TEXT_LINES:
        lines[-1] += f"  [$text-muted]batch[/] {s.micro_batch}×{s.grad_accum}"
    else:
        lines.append(_geometry_line(view))
    return "\n".join(lines)


def render_memory_chart(view: RunView, width: int, height: int, now: float) -> str:
    """A labelled chart of reserved memory over the chosen window, ``height`` lines in all."""
    s = view.sample
    if s is None or height < 2 or width < 1:
        return ""
    label = f"reserved, {WINDOW_LABELS[view.window]}"
    values = [float(p.mem_reserved) for p in view.chart_points(now, width)]
    rows = render_chart(values, width, height - 1, top=float(s.mem_capacity) if s.mem_capacity else None)
    return "\n".join([f"[$text-muted]{label[:width]:─<{width}}[/]", *(f"[$accent]{row}[/]" for row in rows)])


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
    d = event.data
    change = f"{d.get('from_micro_batch', '?')}→{d.get('to_micro_batch', '?')}"
    step = f" at step {d['step']}" if "step" in d else ""
    why = ": ".join(str(d[k]) for k in ("kind", "reason") if d.get(k))
    return f"{change}{step}" + (f" ({why})" if why else "")


def _gap_line(gap: int, headroom: int | None, width: int) -> str:
    """Reserved minus allocated (the allocator's cache) and capacity minus peak."""
    room_style = "$text-error" if headroom is not None and headroom <= 0 else "$text"
    explain = " [$text-muted](reserved−allocated)[/]" if width >= WIDE_AT else ""
    return (
        f"[$text-muted]{'gap':<{LABEL_WIDTH}}[/]{format_bytes(gap)}{explain}"
        f"  [$text-muted]headroom[/] [{room_style}]{format_bytes(headroom)}[/]"
    )


def _capacity_line(view: RunView, capacity: int | None) -> str:
    """Capacity (a CPU stand-in says so), the controller's budget when set, NVML's "used"."""
    s = view.sample
    assert s is not None
    device_used = getattr(s, "mem_device_used", None)  # NVML, CUDA only
    budget = (
        f"  [$text-muted]budget[/] {format_bytes(s.mem_budget)}"
        if s.mem_budget and (s.mem_kind != "cpu-rss" or s.mem_budget != capacity)
        else ""
    )
    extra = (
        "  [$text-warning](not VRAM)[/]"
        if s.mem_kind == "cpu-rss"
        else f"  [$text-muted]device used[/] {format_bytes(device_used)}"
    )
    label = CAPACITY_LABELS[s.mem_kind]
    return f"[$text-muted]{label:<{LABEL_WIDTH}}[/]{format_bytes(capacity)}{budget}{extra}"


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

    HAS_CHART = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Memory", id=id)

    def draw(self, view: RunView, now: float) -> str:
        size = self.content_size
        self.border_title = memory_title(view, size.width)
        return render_memory(view, size.width, size.height)

    def draw_chart(self, view: RunView, now: float, width: int, height: int) -> str:
        return render_memory_chart(view, width, height, now)
