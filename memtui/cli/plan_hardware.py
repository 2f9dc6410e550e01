"""The hardware ``memtui plan`` plans for: the flags, else what NVML sees, else this host.

GPU count and memory: ``--gpus``/``--gpu-memory``, else NVML's first device (count, total
memory, name). Without either, the plan is for the CPU, as memtui trains there: the
config's ranks sharing the host's RAM. The peak: ``--peak-tflops``, the config's
``[hardware] peak_tflops``, or the table by ``--gpu``/NVML name. Every source is named in
the plan. Torch-free.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.config import RunConfig
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


def resolve_hardware(args: argparse.Namespace, config: RunConfig) -> Hardware:
    from engine.memory.capacity_plan import CPU_RUNTIME_BYTES, CUDA_CONTEXT_BYTES

    if args.gpus is not None and args.gpus < 1:
        raise CliError(f"--gpus: at least 1 GPU per node is needed (got {args.gpus})", code=2)
    seen = _nvml_device()
    gpus = args.gpus or (seen[0] if seen else None)
    memory = _size(args.gpu_memory) if args.gpu_memory is not None else (seen[1] if seen else None)
    cpu = gpus is None and memory is None
    if gpus is not None and memory is None:
        raise CliError(
            "--gpu-memory: no GPU visible to NVML to read it from; give it, e.g. --gpu-memory 80G", 2
        )
    name = args.gpu or (seen[2] if seen else None)
    peak, peak_source = _peak(args, config, name)
    link, link_source = _link(args, cpu, name)
    if cpu:
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
    assert gpus is not None and memory is not None
    source = "given" if args.gpu_memory is not None else "nvml"
    return Hardware(
        gpus, memory, source, name, peak, peak_source, link, link_source, False, CUDA_CONTEXT_BYTES
    )


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


def _link(args: argparse.Namespace, cpu: bool, name: str | None) -> tuple[Link, str]:
    from dataclasses import replace

    from engine.memory.communication import LINKS, default_link

    fallback = LINKS["shared-memory"] if cpu else default_link(args.nodes, name)
    link = LINKS[args.interconnect] if args.interconnect else fallback
    source = "given" if args.interconnect else "default"
    if args.bandwidth:
        return replace(link, gb_per_s=args.bandwidth, note=f"{args.bandwidth:g} GB/s given"), "given"
    return link, source


def _size(text: str) -> int:
    from memtui.chaos_values import parse_size

    try:
        value = parse_size(text)
    except ValueError as err:
        raise CliError(f"--gpu-memory: {err}", code=2) from None
    if value <= 0:
        raise CliError(f"--gpu-memory: must be positive (got {text!r})", code=2)
    return value


def _nvml_device() -> tuple[int, int, str] | None:
    """(count, bytes of device 0, its name) from NVML; None without NVML or a GPU."""
    try:
        from engine.doctor.nvml_probe import PynvmlLibrary

        nvml = PynvmlLibrary()
        nvml.init()
    except Exception:  # no pynvml, no driver: a CPU host
        return None
    try:
        count = nvml.device_count()
        if count < 1:
            return None
        return count, nvml.memory(0)[0], nvml.name(0)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.shutdown()


def _host_ram() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
