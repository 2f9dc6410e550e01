"""Common GPUs by the name NVML reports: peak dense TFLOP/s by precision, memory, and the link
between the GPUs of one server.

Torch-free data and one lookup. Figures are the vendors' dense (no sparsity) tensor-core
peaks for fp16/bf16 and the plain (non-TF32) fp32 peak: torch multiplies fp32 matrices in
full fp32 unless TF32 is allowed. The first entry whose every word is in the device's
lower-cased name wins, so the more specific entries come first ("h100 pcie" before "h100").
Blackwell figures: NVIDIA's HGX B200 and GB200 NVL72 datasheets (per GPU: the 8- or
72-GPU totals divided), the RTX Blackwell whitepaper for the RTX 5090 (GeForce: fp16 with
fp32 accumulation at half rate, as the RTX 4090's) and the RTX PRO 6000 (full rate); the RTX
5080 and 5070 Ti from NVIDIA's "AI TOPS" (FP4 with sparsity) the same way the table's RTX 5090
figure relates to its own (FP4 sparse / 16, halved for fp32 accumulation); B300 and GB300 from
NVIDIA's HGX B300 and GB300 NVL72 pages (the same FP16/BF16 as B200 and GB200). GB10 (DGX
Spark) has no published FP16 figure: 125 is its 1 PFLOP FP4-with-sparsity halved for sparsity
and divided by 4 (FP4 to FP16, as on every Blackwell part), and 31 TFLOP/s fp32 is NVIDIA's.

Memory is the GPU's own in GiB as sold (None where one model comes in several sizes: the NVML
name then says it, ``A100-SXM4-80GB``, see ``memory_from_name``). ``link`` names the
interconnect between the GPUs of one server (``engine.memory.communication.LINKS``): NVLink on
SXM and superchip parts, PCIe on cards (an RTX 5090 has no NVLink: 6-12 times less than the
NVLink the plan assumed for every server before).

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
    memory_gib: float | None
    """The GPU's memory as sold, GiB; None where the model comes in several sizes."""
    link: str
    """The interconnect between the GPUs of one server: a key of ``communication.LINKS``."""

    def for_precision(self, precision: str) -> float | None:
        return {"fp16": self.fp16, "bf16": self.bf16, "fp32": self.fp32}.get(precision)


PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak("gb300", 2500.0, 2500.0, 80.0, 288, "nvlink5"),  # one Blackwell Ultra GPU of GB300
    DevicePeak("gb200", 2500.0, 2500.0, 80.0, 186, "nvlink5"),  # one Blackwell GPU of a GB200 superchip
    DevicePeak("gb10", 125.0, 125.0, 31.0, 128, "pcie5"),  # DGX Spark: one GPU, unified memory
    DevicePeak("b300", 2250.0, 2250.0, 75.0, 288, "nvlink5"),  # HGX B300
    DevicePeak("b200", 2250.0, 2250.0, 75.0, 180, "nvlink5"),  # HGX B200 (SXM)
    DevicePeak("rtx pro 6000", 503.8, 503.8, 126.0, 96, "pcie5"),  # RTX PRO 6000 Blackwell
    DevicePeak("rtx 5090", 209.5, 209.5, 104.8, 32, "pcie5"),  # GeForce: fp16 with fp32 accumulation
    DevicePeak("rtx 5080", 112.6, 112.6, 56.3, 16, "pcie5"),
    DevicePeak("rtx 5070 ti", 87.9, 87.9, 43.9, 16, "pcie5"),
    DevicePeak("gh200", 989.4, 989.4, 66.9, 96, "nvlink4"),
    DevicePeak("h200 nvl", 835.5, 835.5, 60.0, 141, "nvlink4"),  # NVLink bridges, 900 GB/s
    DevicePeak("h200", 989.4, 989.4, 66.9, 141, "nvlink4"),  # SXM
    DevicePeak("h100 pcie", 756.0, 756.0, 51.2, 80, "pcie5"),
    DevicePeak("h100 nvl", 835.0, 835.0, 60.0, 94, "nvlink"),  # NVLink bridge pairs, 600 GB/s
    DevicePeak("h100", 989.4, 989.4, 66.9, 80, "nvlink4"),  # SXM5 ("NVIDIA H100 80GB HBM3")
    DevicePeak("h800", 989.4, 989.4, 66.9, 80, "nvlink-export"),
    DevicePeak("a100 pcie", 312.0, 312.0, 19.5, None, "pcie"),  # "NVIDIA A100-PCIE-40GB"
    DevicePeak("a100", 312.0, 312.0, 19.5, None, "nvlink"),  # SXM4: 40 or 80 GB
    DevicePeak("a800", 312.0, 312.0, 19.5, None, "nvlink-export"),
    DevicePeak("a10g", 125.0, 125.0, 31.2, 24, "pcie"),
    DevicePeak("a10", 125.0, 125.0, 31.2, 24, "pcie"),
    DevicePeak("a30", 165.0, 165.0, 10.3, 24, "pcie"),
    DevicePeak("l40s", 362.1, 362.1, 91.6, 48, "pcie"),
    DevicePeak("l40", 181.0, 181.0, 90.5, 48, "pcie"),
    DevicePeak("l4", 121.0, 121.0, 30.3, 24, "pcie"),
    DevicePeak("rtx 6000 ada", 364.2, 364.2, 91.1, 48, "pcie"),
    DevicePeak("rtx a6000", 154.8, 154.8, 38.7, 48, "pcie"),
    DevicePeak("rtx a5000", 111.1, 111.1, 27.8, 24, "pcie"),
    DevicePeak("rtx 4090", 165.2, 165.2, 82.6, 24, "pcie"),  # GeForce: fp16 with fp32 accumulation
    DevicePeak("rtx 3090", 71.0, 71.0, 35.6, 24, "pcie"),
    DevicePeak("v100", 125.0, None, 15.7, None, "nvlink2"),  # no bf16 tensor cores; 16 or 32 GB
    DevicePeak("t4", 65.0, None, 8.1, 16, "pcie3"),
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


MEMORY_IN_NAME = re.compile(r"(\d+)\s*gb\b")
"""NVML names that carry the size: ``NVIDIA A100-SXM4-80GB``, ``Tesla V100-SXM2-32GB``."""


def memory_from_name(device_name: str) -> int | None:
    """Bytes of memory per GPU from its name (``80GB``), else the table's; None when unknown."""
    found = MEMORY_IN_NAME.search(device_name.lower())
    if found is not None:
        return int(found.group(1)) * 1024**3
    entry = find_peak(device_name)
    return None if entry is None or entry.memory_gib is None else int(entry.memory_gib * 1024**3)
