"""The device's used memory, as the driver counts it, reaches the sample, the store, the
status and the memory panel, read from the GPU torch trains on.

No GPU here: torch.cuda's device properties and pynvml are scripted (tests/fakes).
The host has two GPUs; the run sees only the second (``CUDA_VISIBLE_DEVICES=1``), so
torch's ``cuda:0`` is NVML's index 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.domain import RunStatus, TelemetrySample
from engine.run.storage.store import Store
from engine.trainer.memory.memory_probe import MemoryProbe
from memtui.console.run_view import RunView
from memtui.console.widgets.memory_panel import render_memory
from memtui.status_report import render_status
from tests.fakes.fake_pynvml import FakePynvml, cuda_device_properties
from tests.fakes.run_script import make_sample

GIB = 1 << 30
OTHER, OURS = "00000000:1B:00.0", "00000000:3B:00.0"


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakePynvml:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (70 * GIB, 80 * GIB))
    cuda_device_properties(monkeypatch, buses=[0x3B])  # the one visible device
    return FakePynvml({OTHER: 75 * GIB, OURS: 9 * GIB}).install(monkeypatch)


def test_device_used_is_the_trained_gpus_not_nvmls_same_index(nvml: FakePynvml) -> None:
    probe = MemoryProbe(torch.device("cuda", 0))
    assert probe.device_used() == 9 * GIB
    nvml.used_by_bus[OURS] = 11 * GIB
    assert probe.device_used() == 11 * GIB


def test_nvml_is_initialised_once_per_process(nvml: FakePynvml) -> None:
    probes = [MemoryProbe(torch.device("cuda", 0)) for _ in range(3)]
    for probe in probes * 5:
        probe.device_used()
    assert nvml.inits == 1


def test_an_unknown_device_or_the_cpu_has_no_device_used(
    nvml: FakePynvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert MemoryProbe(torch.device("cpu")).device_used() is None
    cuda_device_properties(monkeypatch, buses=[0x5E])  # NVML does not know this bus
    assert MemoryProbe(torch.device("cuda", 0)).device_used() is None


def test_device_used_is_stored_and_shown(tmp_path: Path) -> None:
    sample = make_sample(3, mem_kind="cuda", mem_capacity=80 * GIB, mem_device_used=9 * GIB)
    with Store(tmp_path / "t.sqlite") as store:
        store.add_step(sample)
        store.flush()
        stored = store.latest_step()
    assert isinstance(stored, TelemetrySample) and stored.mem_device_used == 9 * GIB
    text = render_memory(RunView().with_sample(stored), 100)
    assert "device used[/] 9.00 GiB" in text
    fields = {k: getattr(stored, k) for k in ("mem_allocated", "mem_kind", "mem_device_used")}
    status = RunStatus(run_id="r", name="r", state="running", run_dir=str(tmp_path), **fields)
    assert "device used 9.00 GiB" in render_status(status, now=0.0)


def test_a_cuda_steps_sample_carries_device_used_fragmentation_and_process_peak(
    nvml: FakePynvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from engine.trainer.telemetry.step_telemetry import StepTelemetry

    cuda = torch.cuda
    monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: 3 * GIB)
    monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: 5 * GIB)
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: 4 * GIB)
    monkeypatch.setattr(cuda, "memory_stats", lambda device=None: {"inactive_split_bytes.all.peak": GIB})
    engine = SimpleNamespace(
        global_samples=16, global_steps=2, skipped_steps=0, optimizer=object(),
        train_batch_size=lambda: 8, fp16_enabled=lambda: False, get_global_grad_norm=lambda: 0.5,
        train_micro_batch_size_per_gpu=lambda: 8, gradient_accumulation_steps=lambda: 1,
    )  # fmt: skip
    probe = MemoryProbe(torch.device("cuda", 0))
    sample = StepTelemetry(engine, probe, tokens_per_sample=128, world_size=1, attempt=1).sample(
        loss=2.0, lr=1e-3, scale_during_step=None, overflow=False, step_time_s=0.5
    )
    assert (sample.mem_kind, sample.mem_device_used, sample.mem_fragmentation) == ("cuda", 9 * GIB, GIB)
    assert (sample.mem_peak, sample.mem_process_peak) == (4 * GIB, 4 * GIB)
