"""The CUDA branches of the probe, the budget and OOM detection, on a CPU-only torch.

No GPU here: ``torch.cuda``'s counters are replaced by a scripted allocator, so what is
checked is our side (which counter feeds which figure, the fraction handed to
``set_per_process_memory_fraction``, the per-step peak reset, CUDA's OOM type), not the
driver. bench/cuda_oom.py is the check on real hardware.
"""

from __future__ import annotations

import pytest
import torch

from engine.trainer.memory.memory_probe import MemoryProbe, enforce_budget
from engine.trainer.memory.oom_recovery import is_oom

GIB = 1 << 30


class ScriptedAllocator:
    def __init__(self) -> None:
        self.allocated, self.reserved, self.peak = 3 * GIB, 4 * GIB, 5 * GIB
        self.fraction: tuple[float, torch.device] | None = None
        self.resets = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (10 * GIB, 80 * GIB))
        monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", self._reset)
        monkeypatch.setattr(cuda, "set_per_process_memory_fraction", self._set_fraction)

    def _reset(self, device: torch.device | None = None) -> None:
        self.resets += 1
        self.peak = self.allocated

    def _set_fraction(self, fraction: float, device: torch.device | None = None) -> None:
        self.fraction = (fraction, device)  # type: ignore[assignment]


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> ScriptedAllocator:
    scripted = ScriptedAllocator()
    scripted.install(monkeypatch)
    return scripted


def test_the_probe_reads_the_allocator_not_the_rss(allocator: ScriptedAllocator) -> None:
    probe = MemoryProbe(torch.device("cuda", 0))
    reading = probe.read()
    assert (reading.allocated, reading.reserved, reading.peak) == (3 * GIB, 4 * GIB, 5 * GIB)
    assert reading.capacity == 80 * GIB and reading.kind == "cuda" and probe.kind == "cuda"
    assert probe.resident() == 3 * GIB


def test_the_step_peak_starts_from_the_allocators_reset(allocator: ScriptedAllocator) -> None:
    probe = MemoryProbe(torch.device("cuda", 0))
    probe.begin_step()
    assert allocator.resets == 1 and probe.step_peak() == 3 * GIB
    allocator.peak, allocator.allocated = 7 * GIB, 2 * GIB  # the step's activations came and went
    assert probe.end_step() == (7 * GIB, 2 * GIB)


def test_the_budget_becomes_the_allocators_fraction(allocator: ScriptedAllocator) -> None:
    probe = MemoryProbe(torch.device("cuda", 1))
    assert enforce_budget(probe, 20 * GIB)
    assert allocator.fraction == (0.25, torch.device("cuda", 1))
    allocator.fraction = None
    assert not enforce_budget(probe, 80 * GIB) and allocator.fraction is None  # the whole device: no cap


def test_cuda_out_of_memory_is_an_oom() -> None:
    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert not is_oom(RuntimeError("CUDA error: device-side assert triggered"))


def test_fragmentation_is_the_windows_unfreeable_split_blocks(
    allocator: ScriptedAllocator, monkeypatch: pytest.MonkeyPatch
) -> None:
    stats = {"inactive_split_bytes.all.peak": GIB, "reserved_bytes.all.current": 4 * GIB}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: stats)
    assert MemoryProbe(torch.device("cuda", 0)).fragmentation() == GIB
    assert MemoryProbe(torch.device("cpu")).fragmentation() == 0


def test_the_panel_and_status_show_fragmentation() -> None:
    from engine.domain import RunStatus
    from memtui.console.run_view import RunView
    from memtui.console.widgets.memory_panel import render_memory
    from memtui.status_report import render_status
    from tests.fakes.run_script import make_sample

    sample = make_sample(4, mem_kind="cuda", mem_capacity=80 * GIB, mem_fragmentation=GIB)
    assert "fragmented[/] 1.00 GiB" in render_memory(RunView().with_sample(sample), 100)
    status = RunStatus(run_id="r", name="r", state="running", run_dir="/r", mem_fragmentation=GIB)
    assert "fragmented 1.00 GiB" in render_status(status, now=0.0)
