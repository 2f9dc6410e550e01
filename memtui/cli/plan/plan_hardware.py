"""The hardware ``memtui plan`` plans for: the flags, else what NVML sees, else this host.

GPU count and memory: ``--gpus``/``--gpu-memory``, else NVML's first device (count, total
memory, name), else the device table by ``--gpu`` (its memory; 1 GPU per node unless
``--gpus``). With none of them, the plan is for the CPU, as memtui trains there: the
config's ranks sharing the host's RAM. The peak: ``--peak-tflops``, the config's
``[hardware] peak_tflops``, or the table by ``--gpu``/NVML name. The link within a node:
``--interconnect``/``--bandwidth``, else what NVML says of device 0 (an NVLink up, else its
PCIe generation and width), else the table by name. Every source is named in the plan.
Torch-free.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.config.run_config import RunConfig
    from engine.doctor.nvml_probe import NvmlLibrary
    from engine.memory.communication import Link


@dataclass(frozen=True)
class Hardware:
    gpus_per_node: int
    memory: int
    """Bytes per GPU (the host's RAM for a CPU plan)."""
    memory_source: str
    """``given``, ``nvml`` or ``host RAM``."""
    name: str | None
    peak_tflops: float | None
    peak_source: str
    """``given``, ``config``, ``table (NAME)`` or ``unknown``."""
    link: Link
    link_source: str
    cpu: bool
    context: int
    """Bytes of the named margin's fixed part: the CUDA context, or the CPU process's runtime."""


@dataclass(frozen=True)
class SeenGpu:
    """NVML's device 0 and how many there are."""

    count: int
    memory: int
    """Bytes."""
    name: str
    link: Link | None
    """What NVML says connects it (``communication.seen_link``); None if it cannot say."""


def resolve_hardware(args: argparse.Namespace, config: RunConfig, seen: SeenGpu | None) -> Hardware:
    """``seen``: NVML's view (``nvml_device``; None on a host without one)."""
    from engine.memory.capacity_plan import CPU_RUNTIME_BYTES, CUDA_CONTEXT_BYTES

    if args.gpus is not None and args.gpus < 1:
        raise CliError(f"--gpus: at least 1 GPU per node is needed (got {args.gpus})", code=2)
    asked_gpu = args.gpus is not None or args.gpu_memory is not None or args.gpu is not None
    gpus = args.gpus or (seen.count if seen else 1 if asked_gpu else None)
    name = args.gpu or (seen.name if seen else None)
    peak, peak_source = _peak(args, config, name)
    if gpus is None:
        link, link_source = _link(args, True, None, None)
        return Hardware(
            config.train.ranks,
            _host_ram(),
            "host RAM",
            "cpu",
            peak,
            peak_source,
            link,
            link_source,
            True,
            CPU_RUNTIME_BYTES,
        )
    memory, memory_source = _memory(args, seen, name)
    link, link_source = _link(args, False, name, seen)
    return Hardware(
        gpus, memory, memory_source, name, peak, peak_source, link, link_source, False, CUDA_CONTEXT_BYTES
    )


def planned_world(args: argparse.Namespace, seen: SeenGpu | None) -> int | None:
    """The GPUs a plan is for, all nodes together (``--gpus``, else what NVML sees, else one
    when a GPU is named); None for a CPU plan (the config's own ranks)."""
    asked_gpu = args.gpu_memory is not None or args.gpu is not None
    if args.gpus is not None:
        per_node: int | None = args.gpus
    else:
        per_node = seen.count if seen else 1 if asked_gpu else None
    return per_node * args.nodes if per_node else None


def _memory(args: argparse.Namespace, seen: SeenGpu | None, name: str | None) -> tuple[int, str]:
    """Bytes per GPU and where they came from: given, NVML, else the GPU's name or the table."""
    from engine.memory.device_peaks import memory_from_name

    if args.gpu_memory is not None:
        return _size(args.gpu_memory), "given"
    if seen is not None:
        return seen.memory, "nvml"
    table = memory_from_name(name) if name else None
    if table is None:
        why = (
            f"the table has no single size for {name!r}" if name else "no GPU visible to NVML to read it from"
        )
        raise CliError(f"--gpu-memory: {why}; give it, e.g. --gpu-memory 80G", 2)
    return table, f"table ({name})"


def _peak(args: argparse.Namespace, config: RunConfig, name: str | None) -> tuple[float | None, str]:
    from engine.memory.device_peaks import device_peak_of, find_peak

    if args.peak_tflops:
        return args.peak_tflops, "given"
    if config.hardware.peak_tflops:
        return config.hardware.peak_tflops, "config"
    if name is None:
        return None, "unknown"
    precision = config.train.precision
    value, source = device_peak_of(name, precision)
    if value is None and args.gpu:
        known = find_peak(name) is not None
        why = f"has no {precision} peak in the table" if known else "not in memtui's peak table"
        raise CliError(f"--gpu {args.gpu!r}: {why}; give its peak with --peak-tflops", code=2)
    return value, source


def _link(args: argparse.Namespace, cpu: bool, name: str | None, seen: SeenGpu | None) -> tuple[Link, str]:
    from dataclasses import replace

    from engine.memory.communication import LINKS, default_link

    if args.interconnect:
        link, source = LINKS[args.interconnect], "given"
    elif cpu:
        link, source = LINKS["shared-memory"], "default"
    elif args.nodes == 1 and seen is not None and seen.link is not None:
        link, source = seen.link, "nvml"
    else:
        link, source = default_link(args.nodes, name), "table" if args.nodes == 1 else "default"
    if args.bandwidth:
        return replace(link, gb_per_s=args.bandwidth, note=f"{args.bandwidth:g} GB/s given"), "given"
    return link, source


def _size(text: str) -> int:
    from memtui.chaos.chaos_values import parse_size

    try:
        value = parse_size(text)
    except ValueError as err:
        raise CliError(f"--gpu-memory: {err}", code=2) from None
    if value <= 0:
        raise CliError(f"--gpu-memory: must be positive (got {text!r})", code=2)
    return value


def nvml_device() -> SeenGpu | None:
    """NVML's device 0 and the count, read once per plan; None without NVML or a GPU."""
    from engine.doctor.nvml_probe import read_once

    return read_once(seen_gpu)


def seen_gpu(nvml: NvmlLibrary) -> SeenGpu | None:
    """What an initialised NVML says of device 0; the link left None if NVML cannot say."""
    from engine.memory.communication import seen_link

    count = nvml.device_count()
    if count < 1:
        return None
    name = nvml.name(0)
    try:
        gen, width, _, _ = nvml.pcie(0)
        link: Link | None = seen_link(nvml.nvlinks_active(0), gen, width, name)
    except Exception:  # a driver without these queries: the table decides
        link = None
    return SeenGpu(count, nvml.memory(0)[0], name, link)


def _host_ram() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
