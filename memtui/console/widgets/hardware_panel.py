"""Hardware: per GPU utilization, NVML memory beside the allocator's, temperature, power and
throttling; the host's CPU, RAM and free disk; the engine's own processes.

Drawn from the newest ``HardwareSnapshot`` (sent every ``alerts.hardware_interval_s``), so
it redraws only when a reading arrives, not per step. Without NVML (no driver, no GPU, a
laptop) it says so in one banner line and shows the rest: never an error.
"""

from __future__ import annotations

import time
from typing import Any

from textual.markup import escape

from engine.domain import MemoryLevel, TelemetrySample, Thresholds
from engine.hardware_report import SLOWING_THROTTLES, GpuReport, HardwareSnapshot, HostReport
from memtui.console.run_view import DEFAULT_THRESHOLDS, RunView
from memtui.console.widgets.panel import Panel
from memtui.formatting import PLACEHOLDER, format_bytes

UTIL_LOW_PCT = 30
"""GPU utilization under this while training is worth a look (an input-bound or stuck run)."""
LEVEL_STYLES: dict[MemoryLevel, str] = {"ok": "$text", "warn": "$text-warning", "critical": "$text-error"}
"""Memory figures' colour by level (the run's ``memory.warn`` and ``memory.critical``)."""
TEMPERATURE_WARN_BELOW_C = 10
"""Degrees under the GPU's slowdown threshold from which its temperature is flagged."""
POWER_WARN_AT = 0.98
"""Power draw / limit from which the power figure is flagged (the cap is near)."""
DISK_WARN_FREE = 0.05
"""Free fraction of a disk under which it is flagged."""
NO_READING = "[$text-muted]waiting for the first hardware reading…[/]"
LABEL_WIDTH = 5


def render_hardware(
    snapshot: HardwareSnapshot | None,
    sample: TelemetrySample | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    ended: bool = False,
    height: int | None = None,
    reporter: int | None = None,
) -> str:
    """Body markup: a banner or one line per GPU, then host, disks and engine processes.

    ``sample`` is the step sample current when the reading came: its allocator figures are
    shown beside NVML's "used" on the GPU that ``reporter`` (the pid of the rank whose
    figures they are: rank 0, from ``trainer_started``) holds, or on the only GPU. Lines are not wrapped; the
    panel crops them, so each line leads with what matters most. Memory is coloured by the
    run's ``thresholds`` (the panel passes its view's). Once the run has ``ended`` its
    processes are gone: their last readings (and the allocator's figures) are not shown.
    More lines than ``height`` (the compact layout, many GPUs): the first GPUs, a line
    counting the others, and the host's lines, so that the box stays whole.
    """
    if snapshot is None:
        return NO_READING
    gpus = gpu_lines(snapshot, None if ended else sample, thresholds, reporter)
    host = host_lines(snapshot.host, thresholds, ended=ended)
    room = len(gpus) if height is None else height - len(host)  # lines the GPUs may take
    if len(gpus) > room >= 2:
        hidden = len(gpus) - room + 1
        gpus = [*gpus[: room - 1], f"[$text-muted]+{hidden} more GPUs (z on this panel shows all)[/]"]
    return "\n".join(gpus + host)


def hardware_title(snapshot: HardwareSnapshot | None) -> str:
    """``Hardware · 8× NVIDIA H200 · 12:03:04`` (names, count and the reading's local time)."""
    if snapshot is None:
        return "Hardware"
    names = sorted({g.name for g in snapshot.gpus if g.name})
    what = f" · {len(snapshot.gpus)}× {escape(', '.join(names))}" if names else ""
    return f"Hardware{what} · {time.strftime('%H:%M:%S', time.localtime(snapshot.ts))}"


def gpu_lines(
    snapshot: HardwareSnapshot,
    sample: TelemetrySample | None,
    thresholds: Thresholds,
    reporter: int | None = None,
) -> list[str]:
    if not snapshot.gpus:
        reason = snapshot.nvml or "NVML found no devices"
        reason = reason.removeprefix("NVML: ")
        return [f"[$text-warning]no GPU: NVML unavailable ({escape(reason)})[/] [$text-muted]host only[/]"]
    ours = _allocator_gpu(snapshot.gpus, sample, reporter)
    return [gpu_line(g, thresholds, sample if g.index == ours else None) for g in snapshot.gpus]


def _allocator_gpu(gpus: list[GpuReport], sample: TelemetrySample | None, reporter: int | None) -> int | None:
    """Which GPU the telemetry's allocator figures belong to: the one whose processes include
    the reporting rank's pid, or the only one; None otherwise (NVML's index order is not
    CUDA's, and another rank's GPU is not rank 0's: better no figure than one on the wrong
    line)."""
    if sample is None or sample.mem_kind != "cuda":
        return None
    held = [g.index for g in gpus if reporter is not None and any(p.pid == reporter for p in g.processes)]
    if held:
        return held[0]
    return gpus[0].index if len(gpus) == 1 else None


def gpu_line(gpu: GpuReport, thresholds: Thresholds, sample: TelemetrySample | None = None) -> str:
    """``GPU0 util  95%  mem 10.0 GiB/80.0 GiB alloc 8.00 GiB rsv 9.10 GiB  62°C  400/700 W  ok``."""
    parts = [
        f"[b]{f'GPU{gpu.index}':<{LABEL_WIDTH}}[/b]" + _util(gpu.utilization_pct),
        _memory(gpu, sample, thresholds),
    ]
    parts += [_temperature(gpu), _power(gpu), _throttle(gpu.throttle_reasons)]
    if gpu.ecc_uncorrected:
        parts.append(f"[$text-error]ECC {gpu.ecc_uncorrected}[/]")
    others = sum(1 for p in gpu.processes if p.ours is False)
    if others:
        parts.append(f"[$text-warning]+{others} other proc{'s' if others > 1 else ''}[/]")
    unattributed = sum(1 for p in gpu.processes if p.ours is None)  # another pid namespace
    if unattributed:
        parts.append(f"[$text-muted]{unattributed} proc{'s' if unattributed > 1 else ''} unattributed[/]")
    return "  ".join(parts)


def _util(pct: int | None) -> str:
    if pct is None:
        return f"[$text-muted]util[/] {PLACEHOLDER:>4}"
    style = "$text-warning" if pct < UTIL_LOW_PCT else "$text"
    return f"[$text-muted]util[/] [{style}]{pct:>3}%[/]"


def _memory(gpu: GpuReport, sample: TelemetrySample | None, thresholds: Thresholds) -> str:
    used, total = gpu.memory_used, gpu.memory_total
    style = LEVEL_STYLES[thresholds.memory_level(used / total)] if used is not None and total else "$text"
    text = f"[$text-muted]mem[/] [{style}]{format_bytes(used)}[/]/{format_bytes(total)}"
    if sample is not None:
        text += (
            f" [$text-muted]alloc[/] {format_bytes(sample.mem_allocated)}"
            f" [$text-muted]rsv[/] {format_bytes(sample.mem_reserved)}"
        )
    return text


def _temperature(gpu: GpuReport) -> str:
    temp, slow = gpu.temperature_c, gpu.temperature_slowdown_c
    if temp is None:
        return f"{PLACEHOLDER}°C"
    style = "$text"
    if slow is not None:
        if temp >= slow:
            style = "$text-error"
        elif temp >= slow - TEMPERATURE_WARN_BELOW_C:
            style = "$text-warning"
    return f"[{style}]{temp}°C[/]"


def _power(gpu: GpuReport) -> str:
    draw, limit = gpu.power_w, gpu.power_limit_w
    if draw is None:
        return f"{PLACEHOLDER} W"
    style = "$text-warning" if limit and draw >= POWER_WARN_AT * limit else "$text"
    cap = f"/{limit:.0f}" if limit else ""
    return f"[{style}]{draw:.0f}[/]{cap} W"


def _throttle(reasons: list[str]) -> str:
    if not reasons:
        return "[$text-success]no throttle[/]"
    style = "$text-error" if SLOWING_THROTTLES.intersection(reasons) else "$text-warning"
    return f"[{style}]throttled: {escape(', '.join(reasons))}[/]"


def host_lines(host: HostReport, thresholds: Thresholds, *, ended: bool = False) -> list[str]:
    """Host CPU and RAM; free disk at the run and checkpoint directories; engine processes."""
    if "psutil" in host.unavailable:
        return [f"[$text-warning]host readings unavailable ({escape(host.unavailable['psutil'])})[/]"]
    cpu = PLACEHOLDER if host.cpu_pct is None else f"{host.cpu_pct:.0f}%"
    cores = f" of {host.cpu_count}" if host.cpu_count else ""
    load = f" load {host.load_1m:.1f}" if host.load_1m is not None else ""
    ram = _ram(host, thresholds)
    swap = f"  [$text-muted]swap[/] {format_bytes(host.swap_used)}" if host.swap_total else ""
    head = f"[$text-muted]{'host':<{LABEL_WIDTH}}[/]"
    lines = [f"{head}CPU {cpu}{cores}{load}  [$text-muted]RAM[/] {ram}{swap}"]
    disks = [_disk(d.label, d.free_bytes, d.total_bytes, d.unavailable) for d in host.disks]
    if disks:
        lines.append(f"[$text-muted]{'disk':<{LABEL_WIDTH}}[/]" + "  ".join(disks))
    procs = [_process(p.role, p.pid, p.cpu_pct, p.rss_bytes) for p in host.processes]
    if ended:
        procs = ["[$text-muted]none: the run has ended[/]"] if procs else []
    if procs:
        lines.append(f"[$text-muted]{'proc':<{LABEL_WIDTH}}[/]" + "  ".join(procs))
    return lines


def _ram(host: HostReport, thresholds: Thresholds) -> str:
    """Host RAM in use; flagged (never as an error: it is not the run's budget) from the warning level."""
    total, available = host.ram_total, host.ram_available
    if total is None or available is None:
        return PLACEHOLDER
    used = total - available
    high = bool(total) and thresholds.memory_level(used / total) != "ok"
    style = "$text-warning" if high else "$text"
    return f"[{style}]{format_bytes(used)}[/]/{format_bytes(total)}"


def _disk(label: str, free: int | None, total: int | None, unavailable: str | None) -> str:
    if free is None:
        why = f" ({escape(unavailable)})" if unavailable else ""
        return f"[$text-muted]{escape(label)}[/] [$text-warning]{PLACEHOLDER}{why}[/]"
    style = "$text-warning" if total and free / total < DISK_WARN_FREE else "$text"
    return f"[$text-muted]{escape(label)}[/] [{style}]{format_bytes(free)} free[/]"


def _process(role: str, pid: int, cpu_pct: float | None, rss: int | None) -> str:
    cpu = PLACEHOLDER if cpu_pct is None else f"{cpu_pct:.0f}%"
    return f"[$text-muted]{escape(role)}[/] {cpu} {format_bytes(rss)}"


class HardwarePanel(Panel):
    """GPUs (NVML), host and the engine's processes, as of the newest hardware reading."""

    DEFAULT_CSS = """
    HardwarePanel {
        height: auto;
        max-height: 14;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Hardware", id=id)
        self._drawn: tuple[Any, ...] | None = None

    def show(self, view: RunView, now: float, *, charts: bool = True) -> None:
        """Draw only when the reading (or the panel's size) changed: hardware comes every
        few seconds, while the app hands every panel each new step."""
        key = (
            view.hardware,
            view.hardware_sample,
            view.thresholds,
            view.finished,
            view.started,
            self.content_size,
        )
        if self._drawn is not None and all(a is b or a == b for a, b in zip(key, self._drawn, strict=True)):
            self._view, self._now = view, now
            return
        self._drawn = key
        super().show(view, now, charts=charts)

    def draw(self, view: RunView, now: float) -> str:
        self.border_title = hardware_title(view.hardware)
        return render_hardware(
            view.hardware,
            view.hardware_sample,
            view.thresholds,
            ended=view.finished,
            height=self.content_size.height or None,
            reporter=view.started.pid if view.started is not None else None,
        )
