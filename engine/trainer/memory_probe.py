"""Memory readings, in bytes, named by what they measure.

CUDA (kind "cuda"): the caching allocator's counters (``memory_allocated``,
``memory_reserved``, ``max_memory_allocated`` since the step began), the device's capacity
from ``mem_get_info`` and, where NVML is present, the device's used memory as the driver
sees it (every process's, plus the CUDA context).
CPU (kind "cpu-rss"): the process's resident set size stands in for allocated and
reserved, the largest RSS seen for the peak, host RAM for capacity, so nobody mistakes it
for VRAM. The per-step peak is sampled after each forward (``note``, from a forward hook),
when a step's activations are all alive.
"""

from __future__ import annotations

from typing import NamedTuple

import psutil
import torch

from engine.domain import MemoryKind


class MemoryReading(NamedTuple):
    allocated: int
    reserved: int
    peak: int
    capacity: int
    kind: MemoryKind


class MemoryProbe:
    """``read()`` costs a few microseconds: it is called after every optimizer step."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or (torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
        self._process = psutil.Process()
        self._peak_rss = 0
        self._step_peak_rss = 0
        self._capacity = self._read_capacity()  # fixed for the process's life: read once

    @property
    def kind(self) -> MemoryKind:
        return "cuda" if self.device.type == "cuda" else "cpu-rss"

    @property
    def capacity(self) -> int:
        """Bytes: the device's total memory (host RAM on the CPU)."""
        return self._capacity

    def _read_capacity(self) -> int:
        if self.device.type == "cuda":
            _free, total = torch.cuda.mem_get_info(self.device)
            return int(total)
        return int(psutil.virtual_memory().total)

    def read(self) -> MemoryReading:
        if self.device.type == "cuda":
            return MemoryReading(
                allocated=torch.cuda.memory_allocated(self.device),
                reserved=torch.cuda.memory_reserved(self.device),
                peak=torch.cuda.max_memory_allocated(self.device),
                capacity=self._capacity,
                kind="cuda",
            )
        rss = self.note()
        return MemoryReading(
            allocated=rss, reserved=rss, peak=self._peak_rss, capacity=self._capacity, kind="cpu-rss"
        )

    # ------------------------------------------------------------ per-step peak

    def resident(self) -> int:
        """Bytes held now: allocated on CUDA, the RSS on the CPU."""
        if self.device.type == "cuda":
            return int(torch.cuda.memory_allocated(self.device))
        return self.note()

    def note(self) -> int:
        """CPU: sample the RSS into the peaks (cheap: one /proc read); CUDA: a no-op."""
        if self.device.type == "cuda":
            return 0
        rss = int(self._process.memory_info().rss)
        self._peak_rss = max(self._peak_rss, rss)
        self._step_peak_rss = max(self._step_peak_rss, rss)
        return rss

    def begin_step(self) -> None:
        """Start a new per-step peak (CUDA: resets the allocator's peak counter)."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._step_peak_rss = 0
            self.note()

    def step_peak(self) -> int:
        """Bytes: the largest use since ``begin_step``."""
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        self.note()
        return self._step_peak_rss

    def device_used(self) -> int | None:
        """NVML's used bytes on this CUDA device (all processes); None without NVML or CUDA."""
        if self.device.type != "cuda":
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:  # no driver library, no permission: NVML is optional
            return None


def enforce_budget(probe: MemoryProbe, budget: int) -> bool:
    """Make ``budget`` (bytes) real on CUDA with ``set_per_process_memory_fraction``.

    True if it was applied; on the CPU nothing can enforce it (see memory.cpu_enforce).
    """
    if probe.device.type != "cuda" or budget >= probe.capacity:
        return False
    from engine.memory_budget import budget_fraction

    torch.cuda.set_per_process_memory_fraction(budget_fraction(budget, probe.capacity), probe.device)
    return True
