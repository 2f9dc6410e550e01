"""Peak dense TFLOP/s of common GPUs by precision, keyed by the name NVML reports.

Torch-free data and one lookup. Figures are the vendors' dense (no sparsity) tensor-core
peaks for fp16/bf16 and the plain (non-TF32) fp32 peak: torch multiplies fp32 matrices in
full fp32 unless TF32 is allowed. The first entry whose every word is in the device's
lower-cased name wins, so the more specific entries come first ("h100 pcie" before "h100").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeak:
    """One device's peaks in TFLOP/s; None where it has no fast path for the precision."""

    key: str
    """Words that must all appear in the NVML name (lower case)."""
    fp16: float
    bf16: float | None
    fp32: float

    def for_precision(self, precision: str) -> float | None:
        return {"fp16": self.fp16, "bf16": self.bf16, "fp32": self.fp32}.get(precision)


PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak("gh200", 989.4, 989.4, 66.9),
    DevicePeak("h200", 989.4, 989.4, 66.9),
    DevicePeak("h100 pcie", 756.0, 756.0, 51.2),
    DevicePeak("h100 nvl", 835.0, 835.0, 60.0),
    DevicePeak("h100", 989.4, 989.4, 66.9),  # SXM5 ("NVIDIA H100 80GB HBM3")
    DevicePeak("h800", 989.4, 989.4, 66.9),
    DevicePeak("a100", 312.0, 312.0, 19.5),  # SXM4 and PCIe alike
    DevicePeak("a800", 312.0, 312.0, 19.5),
    DevicePeak("a10g", 125.0, 125.0, 31.2),
    DevicePeak("a10", 125.0, 125.0, 31.2),
    DevicePeak("a30", 165.0, 165.0, 10.3),
    DevicePeak("l40s", 362.1, 362.1, 91.6),
    DevicePeak("l40", 181.0, 181.0, 90.5),
    DevicePeak("l4", 121.0, 121.0, 30.3),
    DevicePeak("rtx 6000 ada", 364.2, 364.2, 91.1),
    DevicePeak("rtx a6000", 154.8, 154.8, 38.7),
    DevicePeak("rtx a5000", 111.1, 111.1, 27.8),
    DevicePeak("rtx 4090", 165.2, 165.2, 82.6),  # GeForce: fp16 with fp32 accumulation
    DevicePeak("rtx 3090", 71.0, 71.0, 35.6),
    DevicePeak("v100", 125.0, None, 15.7),  # no bf16 tensor cores
    DevicePeak("t4", 65.0, None, 8.1),
)


def find_peak(device_name: str) -> DevicePeak | None:
    """The table's entry for an NVML device name (``NVIDIA A100-SXM4-80GB``), or None."""
    words = device_name.lower().replace("-", " ").replace("_", " ").split()
    for entry in PEAKS:
        if all(word in words for word in entry.key.split()):
            return entry
    return None


def peak_tflops(device_name: str, precision: str) -> float | None:
    """Peak TFLOP/s of one device at ``precision``; None when unknown or unsupported."""
    entry = find_peak(device_name)
    return None if entry is None else entry.for_precision(precision)
