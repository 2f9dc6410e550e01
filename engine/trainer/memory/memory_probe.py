"""Memory readings, in bytes, named by what they measure.

One meaning of peak on both devices: ``peak`` is the step window's (since ``begin_step``),
``process_peak`` the process's high-water mark, kept by the probe.

CUDA (kind "cuda"): the caching allocator's counters (``memory_allocated``,
``memory_reserved``, ``max_memory_allocated`` since the step began), the device's capacity
from ``mem_get_info`` and, where NVML is present, the device's used memory as the driver
sees it (every process's, plus the CUDA context; device_nvml.py finds the device).
CPU (kind "cpu-rss"): the process's resident set size stands in for allocated and
reserved, the largest RSS seen for the peak, host RAM for capacity, so nobody mistakes it
for VRAM. The per-step peak is sampled after a step's first forward (``note``, from a
forward hook the adaptive-memory path holds only while its step runs), when a micro-batch's
activations are all alive, plus at the step's start and end.

The RSS is read from ``/proc/self/statm`` through a descriptor kept open (one ``pread``,
about 1.5 us) rather than ``psutil.Process.memory_info`` (about 10-50 us: it reopens the
file and builds a named tuple), since the trainer reads it a few times per optimizer step.
"""

from __future__ import annotations

import os
import weakref
from typing import NamedTuple

import psutil
import torch

from engine.domain import MemoryKind
from engine.trainer.memory.device_nvml import DeviceUsed

INACTIVE_SPLIT_PEAK = "inactive_split_bytes.all.peak"
"""torch.cuda.memory_stats key: the window's peak of bytes in split blocks not in use."""


class MemoryReading(NamedTuple):
    allocated: int
    reserved: int
    peak: int
    """Bytes: the largest use since the step window began (``begin_step``)."""
    capacity: int
    kind: MemoryKind
    process_peak: int
    """Bytes: the largest use this process has had (the probe's own high-water mark)."""


class RssReader:
    """The process's resident set size in bytes, as cheaply as the platform allows.

    Linux: ``pread`` of ``/proc/<pid>/statm`` (field 2, in pages) on a descriptor opened once
    (reopened after a fork: the path names the opening process). Elsewhere: psutil.
    """

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096  # bytes
        self._pid = -1
        self._fd: int | None = None
        self._process: psutil.Process | None = None

    def __call__(self) -> int:
        if self._pid != os.getpid():
            self._open()
        if self._fd is not None:
            return int(os.pread(self._fd, 128, 0).split(None, 2)[1]) * self._page
        assert self._process is not None
        return int(self._process.memory_info().rss)

    def _open(self) -> None:
        self._pid = os.getpid()
        try:
            fd = os.open(f"/proc/{self._pid}/statm", os.O_RDONLY)
        except OSError:  # no procfs (macOS, Windows): psutil, the slower way
            self._process = psutil.Process()
            return
        self._fd = fd
        weakref.finalize(self, os.close, fd)


class MemoryProbe:
    """``read()`` costs a few microseconds: it is called after every optimizer step."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or (torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
        self._cuda = self.device.type == "cuda"  # asked on every call: a bool, not a string compare
        self.kind: MemoryKind = "cuda" if self._cuda else "cpu-rss"
        self._rss = RssReader()
        self._peak_rss = 0  # bytes, CPU: the process's largest RSS sampled
        self._step_peak_rss = 0  # bytes, CPU: the step window's largest RSS sampled
        self._process_peak = 0  # bytes, CUDA: the largest step peak before the last reset
        self._capacity = self._read_capacity()  # fixed for the process's life: read once
        self._device_used = DeviceUsed(self.device) if self._cuda else None

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
        if self._cuda:
            peak = int(torch.cuda.max_memory_allocated(self.device))
            return MemoryReading(
                allocated=torch.cuda.memory_allocated(self.device),
                reserved=torch.cuda.memory_reserved(self.device),
                peak=peak,
                capacity=self._capacity,
                kind="cuda",
                process_peak=max(self._process_peak, peak),
            )
        rss = self.note()
        return MemoryReading(
            allocated=rss,
            reserved=rss,
            peak=self._step_peak_rss,
            capacity=self._capacity,
            kind="cpu-rss",
            process_peak=self._peak_rss,
        )

    # ------------------------------------------------------------ per-step peak

    def resident(self) -> int:
        """Bytes held now: allocated on CUDA, the RSS on the CPU."""
        if self._cuda:
            return int(torch.cuda.memory_allocated(self.device))
        return self.note()

    def note(self) -> int:
        """CPU: sample the RSS into the peaks (one ``pread``, ~1.5 us); CUDA: a no-op, 0."""
        if self._cuda:
            return 0
        rss = self._rss()
        if rss > self._step_peak_rss:  # the step's peak never exceeds the process's
            self._step_peak_rss = rss
            if rss > self._peak_rss:
                self._peak_rss = rss
        return rss

    def begin_step(self, resident: int | None = None) -> None:
        """Start a new per-step peak.

        CUDA: the allocator keeps one peak counter per device, so a step's own peak needs it
        reset here (what the controller calibrates against); the process's high-water mark
        it held is kept in ``process_peak`` first. Code that reads ``max_memory_allocated``
        itself (DeepSpeed's ``see_memory_usage`` resets it too) sees the running step's.
        CPU: ``resident``, an RSS the caller read just now, starts it without another read.
        """
        if self._cuda:
            self._process_peak = max(self._process_peak, int(torch.cuda.max_memory_allocated(self.device)))
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        self._step_peak_rss = 0
        if resident is None:
            self.note()
        else:
            self._step_peak_rss = resident
            self._peak_rss = max(self._peak_rss, resident)

    def step_peak(self) -> int:
        """Bytes: the largest use since ``begin_step``, including now."""
        return self.end_step()[0]

    def end_step(self) -> tuple[int, int]:
        """(peak since ``begin_step``, resident now) in bytes, from one reading."""
        if self._cuda:
            peak = torch.cuda.max_memory_allocated(self.device)
            return int(peak), int(torch.cuda.memory_allocated(self.device))
        resident = self.note()
        return self._step_peak_rss, resident

    def fragmentation(self) -> int:
        """CUDA: the largest bytes of split blocks not in use since ``begin_step``: reserved
        that no tensor uses and ``empty_cache`` cannot free (allocator's ``inactive_split``),
        counted by the budget's cap. One ``memory_stats`` call (a dict of ~200 counters).
        CPU: 0 (the RSS stands in for both allocated and reserved)."""
        if not self._cuda:
            return 0
        return int(torch.cuda.memory_stats(self.device).get(INACTIVE_SPLIT_PEAK, 0))

    def device_used(self) -> int | None:
        """NVML's used bytes on this CUDA device (all processes); None without NVML or CUDA."""
        return None if self._device_used is None else self._device_used.read()


def enforce_budget(probe: MemoryProbe, budget: int) -> bool:
    """Make ``budget`` (bytes) real on CUDA with ``set_per_process_memory_fraction``.

    True if it was applied; on the CPU nothing can enforce it (see memory.cpu_enforce).
    """
    if probe.kind != "cuda" or budget >= probe.capacity:
        return False
    from engine.memory.budget import budget_fraction

    torch.cuda.set_per_process_memory_fraction(budget_fraction(budget, probe.capacity), probe.device)
    return True
