"""Memory readings once per step, in bytes, named by what they measure.

CUDA: the caching allocator's counters and the device's capacity (kind "cuda").
CPU: the process's resident set size stands in for allocated and reserved, the largest RSS
seen for the peak, host RAM for capacity (kind "cpu-rss"), so nobody mistakes it for VRAM.
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
        self._capacity = self._read_capacity()  # fixed for the process's life: read once

    @property
    def kind(self) -> MemoryKind:
        return "cuda" if self.device.type == "cuda" else "cpu-rss"

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
        rss = self._process.memory_info().rss
        self._peak_rss = max(self._peak_rss, rss)
        return MemoryReading(
            allocated=rss, reserved=rss, peak=self._peak_rss, capacity=self._capacity, kind="cpu-rss"
        )
