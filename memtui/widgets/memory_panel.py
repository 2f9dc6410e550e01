"""Memory against capacity as bars; says plainly when the numbers are a CPU stand-in."""

from __future__ import annotations

from memtui.formatting import format_bytes, format_percent
from memtui.run_view import RunView
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


def memory_title(view: RunView) -> str:
    kind = view.sample.mem_kind if view.sample else None
    return f"Memory · {KIND_LABELS[kind]}" if kind else "Memory"


def render_memory(view: RunView, width: int) -> str:
    """Allocated/reserved/peak bars ``width`` cells wide in all, against capacity."""
    s = view.sample
    if s is None:
        return "[$text-muted]waiting for the first step…[/]"
    capacity = s.mem_capacity or None
    bar_width = max(4, width - LABEL_WIDTH - FIGURES_WIDTH)
    lines = [
        _bar_line("allocated", s.mem_allocated, capacity, bar_width),
        _bar_line("reserved", s.mem_reserved, capacity, bar_width),
        _bar_line("peak", s.mem_peak, capacity, bar_width),
        f"[$text-muted]{CAPACITY_LABELS[s.mem_kind]:<{LABEL_WIDTH}}[/]{format_bytes(capacity)}"
        + ("  [$text-warning](not VRAM)[/]" if s.mem_kind == "cpu-rss" else ""),
    ]
    return "\n".join(lines)


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
    """Allocated, reserved and peak memory of the newest step."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Memory", id=id)

    def draw(self, view: RunView, now: float) -> str:
        self.border_title = memory_title(view)
        return render_memory(view, self.content_size.width)
