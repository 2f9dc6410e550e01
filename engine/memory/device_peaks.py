"""Peak dense TFLOP/s of common GPUs by precision, keyed by the name NVML reports.

Torch-free data and one lookup. Figures are the vendors' dense (no sparsity) tensor-core
peaks for fp16/bf16 and the plain (non-TF32) fp32 peak: torch multiplies fp32 matrices in
full fp32 unless TF32 is allowed. The first entry whose every word is in the device's
lower-cased name wins, so the more specific entries come first ("h100 pcie" before "h100").
Blackwell figures: NVIDIA's HGX B200 and GB200 NVL72 datasheets (per GPU: the 8- or
72-GPU totals divided), the RTX Blackwell whitepaper for the RTX 5090 (GeForce: fp16 with
fp32 accumulation at half rate, as the RTX 4090's) and the RTX PRO 6000 (full rate).

A MIG slice (``NVIDIA A100-SXM4-80GB MIG 3g.40gb``) has ``N`` of the GPU's compute slices
(7 on A100, H100, H200 and B200; 4 on A30): its peak is that share of the whole GPU's.
"""

from __future__ import annotations

import re
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
    DevicePeak("gb200", 2500.0, 2500.0, 80.0),  # one Blackwell GPU of a GB200 superchip
    DevicePeak("b200", 2250.0, 2250.0, 75.0),  # HGX B200 (SXM)
    DevicePeak("rtx pro 6000", 503.8, 503.8, 126.0),  # RTX PRO 6000 Blackwell (workstation/server)
    DevicePeak("rtx 5090", 209.5, 209.5, 104.8),  # GeForce: fp16 with fp32 accumulation
    DevicePeak("gh200", 989.4, 989.4, 66.9),
    DevicePeak("h200 nvl", 835.5, 835.5, 60.0),
    DevicePeak("h200", 989.4, 989.4, 66.9),  # SXM
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


MIG_SLICE = re.compile(r"\bmig (\d+)g\.")
"""A MIG device's name: ``... MIG 3g.40gb`` (3 compute slices, 40 GB)."""
MIG_SLICES = {"a30": 4}
"""Compute slices of a whole GPU where not 7 (keyed as PEAKS)."""
FULL_GPU_SLICES = 7


def mig_share(device_name: str) -> tuple[int, int] | None:
    """(slices of the MIG device, slices of the whole GPU); None when not a MIG slice."""
    found = MIG_SLICE.search(device_name.lower())
    if found is None:
        return None
    entry = find_peak(device_name)
    total = MIG_SLICES.get(entry.key, FULL_GPU_SLICES) if entry else FULL_GPU_SLICES
    return int(found.group(1)), total


def device_peak_of(device_name: str, precision: str) -> tuple[float | None, str]:
    """(peak TFLOP/s of the device at ``precision``, where it came from): a MIG slice gets
    its share of the whole GPU's; (None, ``unknown``) when the table cannot say."""
    entry = find_peak(device_name)
    value = None if entry is None else entry.for_precision(precision)
    if entry is None or value is None:
        return None, "unknown"
    share = mig_share(device_name)
    if share is None:
        return value, f"table ({entry.key})"
    slices, total = share
    return value * slices / total, f"table ({entry.key}, MIG {slices}/{total})"


def find_peak(device_name: str) -> DevicePeak | None:
    """The table's entry for an NVML device name (``NVIDIA A100-SXM4-80GB``), or None."""
    words = device_name.lower().replace("-", " ").replace("_", " ").split()
    for entry in PEAKS:
        if all(word in words for word in entry.key.split()):
            return entry
    return None


def peak_tflops(device_name: str, precision: str) -> float | None:
    """Peak TFLOP/s of one device (a MIG slice: its share) at ``precision``; None when
    unknown or unsupported."""
    return device_peak_of(device_name, precision)[0]
