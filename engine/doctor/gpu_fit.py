"""Does a run's config fit the GPUs this host shows? Checked before anything starts, from NVML
alone (torch-free, a few milliseconds), so that a run that cannot work fails in one line, not
minutes later in a trainer's traceback:

- ``train.ranks`` above the GPUs visible to NVML (after ``CUDA_VISIBLE_DEVICES``): torchrun
  would start ranks that find no device of their own;
- ``bf16`` on a GPU of compute capability below 8.0 (before Ampere: V100, T4, RTX 20): no
  bf16 tensor cores, and torch emulates it slowly or refuses;
- a torch built for a CUDA that has no kernels for the GPU (``gpu_architecture``: an RTX 50
  with a CUDA 12.6 wheel, a V100 with a CUDA 13 one).

A host where NVML shows no GPU runs on the CPU (its ranks share the host): nothing to check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.config.run_config import RunConfig
from engine.doctor.gpu_architecture import cuda_build_problem
from engine.doctor.nvml_probe import NvmlLibrary
from engine.hardware_report import Finding, GpuReport

BF16_CAPABILITY = (8, 0)
"""The first compute capability with bf16 tensor cores (Ampere)."""


@dataclass(frozen=True)
class VisibleGpu:
    index: int
    name: str
    capability: tuple[int, int] | None
    """(major, minor); None where NVML cannot say."""


def visible_gpus(nvml: NvmlLibrary, environ: Mapping[str, str] = os.environ) -> list[VisibleGpu]:
    """The GPUs a trainer started here would see: NVML's, narrowed by ``CUDA_VISIBLE_DEVICES``
    when it lists indices (UUIDs and MIG names are left to CUDA: every device is kept)."""
    count = nvml.device_count()
    shown = list(range(count))
    wanted = environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is not None:
        parts = [p.strip() for p in wanted.split(",") if p.strip()]
        if all(p.lstrip("-").isdigit() for p in parts):
            shown = []
            for part in parts:  # CUDA stops at the first invalid index
                if not 0 <= int(part) < count or int(part) in shown:
                    break
                shown.append(int(part))
    return [VisibleGpu(i, nvml.name(i), _capability(nvml, i)) for i in shown]


def _capability(nvml: NvmlLibrary, index: int) -> tuple[int, int] | None:
    try:
        return nvml.compute_capability(index)
    except Exception:  # an old driver: the check is skipped, not failed
        return None


def fit_problems(
    config: RunConfig, gpus: Sequence[VisibleGpu], nvml_seen: bool, torch_cuda: str | None = None
) -> list[str]:
    """One line per way ``config`` cannot run on ``gpus``; none on a host without GPUs
    (``nvml_seen`` False: NVML absent or no device, a CPU run). ``torch_cuda``: the CUDA
    torch was built for (``torch/version.py``), checked against each GPU's architecture."""
    if not nvml_seen:
        return []
    problems = []
    for gpu in gpus[: max(config.train.ranks, 1)]:
        built_for = None if gpu.capability is None else cuda_build_problem(gpu.capability, torch_cuda)
        if built_for is not None:
            problems.append(f"GPU{gpu.index} ({gpu.name}): {built_for}")
            break  # one line: the same torch for every GPU
    ranks = config.train.ranks
    if ranks > len(gpus):
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        narrowed = f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""
        problems.append(
            f"train.ranks = {ranks} but this host shows {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
            f"{narrowed}: one rank per GPU; set train.ranks to at most {len(gpus)}"
        )
    if config.train.precision == "bf16":
        old = [
            g for g in gpus[: max(ranks, 1)] if g.capability is not None and g.capability < BF16_CAPABILITY
        ]
        if old:
            first = old[0]
            major, minor = first.capability or (0, 0)
            problems.append(
                f"train.precision = bf16 but GPU{first.index} ({first.name}) has compute capability "
                f"{major}.{minor}: bf16 needs 8.0 or later (Ampere); use fp16"
            )
    return problems


def of_reports(reports: Sequence[GpuReport]) -> list[VisibleGpu]:
    """The doctor's GPU readings as ``VisibleGpu`` (capability ``"9.0"`` -> (9, 0))."""
    out = []
    for gpu in reports:
        major, _, minor = (gpu.compute_capability or "").partition(".")
        capability = (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
        out.append(VisibleGpu(gpu.index, gpu.name or f"GPU{gpu.index}", capability))
    return out


def fit_findings(config: RunConfig, reports: Sequence[GpuReport]) -> list[Finding]:
    """``memtui doctor RUN``: each way the run's config cannot run on the GPUs read, unhealthy."""
    return [
        Finding(level="unhealthy", message=p)
        for p in fit_problems(config, of_reports(reports), bool(reports))
    ]
