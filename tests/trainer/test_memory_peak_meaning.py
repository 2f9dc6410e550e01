"""``peak`` means the step window's on both devices; the process's high-water mark is apart.

The same script runs on both: a large step, then a small one. No GPU here: CUDA's counters
are scripted (as test_memory_cuda_path.py), and so is the CPU's RSS.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from engine.trainer.memory.memory_probe import MemoryProbe
from memtui.console.run_view import RunView
from memtui.console.widgets.memory_panel import render_memory
from tests.fakes.run_script import make_sample

GIB = 1 << 30


class Allocator:
    """One counter of bytes in use, and a peak counter that only a reset lowers (CUDA's)."""

    def __init__(self) -> None:
        self.used = GIB
        self.peak = GIB

    def hold(self, nbytes: int) -> None:
        self.used = nbytes
        self.peak = max(self.peak, nbytes)

    def reset(self, device: object = None) -> None:
        self.peak = self.used


def cuda_probe(allocator: Allocator, monkeypatch: pytest.MonkeyPatch) -> MemoryProbe:
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (70 * GIB, 80 * GIB))
    monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: allocator.used)
    monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: allocator.used)
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: allocator.peak)
    monkeypatch.setattr(cuda, "reset_peak_memory_stats", allocator.reset)
    monkeypatch.setattr("engine.trainer.memory.memory_probe.DeviceUsed", lambda device: None)
    return MemoryProbe(torch.device("cuda", 0))


def cpu_probe(allocator: Allocator, monkeypatch: pytest.MonkeyPatch) -> MemoryProbe:
    probe = MemoryProbe(torch.device("cpu"))
    monkeypatch.setattr(probe, "_rss", lambda: allocator.used)
    return probe


@pytest.mark.parametrize("make_probe", [cuda_probe, cpu_probe], ids=["cuda", "cpu"])
def test_peak_is_the_step_windows_and_the_process_peak_is_kept_apart(
    make_probe: Callable[[Allocator, pytest.MonkeyPatch], MemoryProbe], monkeypatch: pytest.MonkeyPatch
) -> None:
    allocator = Allocator()
    probe = make_probe(allocator, monkeypatch)
    probe.begin_step()
    allocator.hold(6 * GIB)  # the large step's activations
    probe.note()
    allocator.hold(GIB)
    assert probe.read().peak == 6 * GIB
    probe.begin_step()
    allocator.hold(2 * GIB)  # the small step
    probe.note()
    allocator.hold(GIB)
    reading = probe.read()
    assert (reading.peak, reading.process_peak) == (2 * GIB, 6 * GIB)
    assert probe.end_step() == (2 * GIB, GIB)


def test_the_cpu_panel_sets_reserved_against_the_process_peak() -> None:
    sample = make_sample(2, mem_reserved=GIB, mem_peak=2 * GIB, mem_process_peak=4 * GIB)
    text = render_memory(RunView().with_sample(sample), 60)
    assert "4.00 GiB  25.0%" in text
