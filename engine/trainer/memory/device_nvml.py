"""The driver's view of one CUDA device's memory (NVML), found by its PCI bus id.

torch numbers devices after ``CUDA_VISIBLE_DEVICES`` and, by default, CUDA's FASTEST_FIRST
order; NVML numbers every GPU on the host in PCI order. So torch's ``cuda:0`` is NVML's
index 0 only by chance: the handle is looked up by the PCI bus id torch reports for the
device (``domain:bus:device.0``), which names the same board on both sides. A MIG slice
shares its GPU's PCI address: the figure is then the whole GPU's (every slice's).

NVML is initialised once per process, on first use, and never shut down (the driver frees
it at exit): ``nvmlInit`` costs milliseconds, a memory read microseconds. Without
nvidia-ml-py, a driver or a PCI id, every read is None: the figure is optional.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import torch

log = logging.getLogger(__name__)

_lock = threading.Lock()
_nvml: Any = None
"""The initialised pynvml module; False once it failed (not retried); None before first use."""


def nvml_module() -> Any:
    """pynvml, initialised once for the process; None where NVML cannot be had."""
    global _nvml
    with _lock:
        if _nvml is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                _nvml = pynvml
            except Exception as err:  # no library, no driver, no permission: NVML is optional
                log.info("NVML unavailable, no device-used figure: %s", err)
                _nvml = False
        return _nvml or None


def pci_bus_id(device: torch.device) -> str | None:
    """``device``'s PCI address as NVML spells it (``00000000:3B:00.0``); None if unknown."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    domain, slot = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
    return f"{domain:08X}:{bus:02X}:{slot:02X}.0"


class DeviceUsed:
    """``read()``: bytes NVML counts as used on ``device`` (every process's, plus contexts)."""

    def __init__(self, device: torch.device) -> None:
        self._handle: Any = None
        self._nvml = nvml_module()
        if self._nvml is None:
            return
        try:
            address = pci_bus_id(device)
            if address is not None:
                self._handle = self._nvml.nvmlDeviceGetHandleByPciBusId(address)
        except Exception as err:  # an address NVML does not know (a MIG slice, a VM)
            log.info("no NVML handle for %s: %s", device, err)

    @property
    def found(self) -> bool:
        """True when NVML knows this device."""
        return self._handle is not None

    def read(self) -> int | None:
        if self._handle is None:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except Exception:  # the GPU fell off the bus: the allocator's figures go on
            return None
