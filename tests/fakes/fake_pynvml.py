"""A scripted ``pynvml`` module for the trainer's NVML reads: GPUs by PCI bus id, in the
host's PCI order (NVML's numbering), each with its used bytes.

``FakePynvml.install(monkeypatch)`` puts it in ``sys.modules`` and forgets any NVML the
trainer initialised before, so the next reader initialises this one.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest


class NVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakePynvml:
    def __init__(self, used_by_bus: dict[str, int]) -> None:
        self.used_by_bus = used_by_bus
        """PCI bus id (``00000000:3B:00.0``) -> used bytes, in NVML's (PCI) order."""
        self.inits = 0
        self.NVMLError = NVMLError

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return list(self.used_by_bus)[index]

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        if bus_id not in self.used_by_bus:
            raise NVMLError(f"NVML_ERROR_NOT_FOUND: {bus_id}")
        return bus_id

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return SimpleNamespace(used=self.used_by_bus[handle], total=80 << 30)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakePynvml:
        import engine.trainer.memory.device_nvml as device_nvml

        monkeypatch.setitem(sys.modules, "pynvml", self)
        monkeypatch.setattr(device_nvml, "_nvml", None)
        return self


def cuda_device_properties(monkeypatch: pytest.MonkeyPatch, buses: list[int]) -> None:
    """torch's visible devices, in torch's order, on PCI buses ``buses`` (domain 0, slot 0)."""
    import torch

    def properties(index: int) -> Any:
        return SimpleNamespace(pci_bus_id=buses[index], pci_domain_id=0, pci_device_id=0, name="Fake H100")

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
