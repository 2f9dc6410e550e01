"""NCCL's flight recorder on by default for CUDA runs, its dump kept in the run directory.

torch's ProcessGroupNCCL keeps a ring of the recent collectives per rank when
``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0, and with ``TORCH_NCCL_DUMP_ON_TIMEOUT`` writes it when
a collective times out, to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + the rank: which collective
each rank last entered, so a hang names the rank that never arrived. The launcher sets them
in the trainer's environment (a user's own values win); gloo (the CPU) has no recorder.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from engine.run.stack_files import flight_prefix

TRACE_ENTRIES = 2000
"""Collectives each rank's ring keeps (a few hundred bytes each: well under 1 MB per rank)."""
NVIDIA_DEVICE = Path("/dev/nvidia0")


def cuda_host(environ: Mapping[str, str], device: Path = NVIDIA_DEVICE) -> bool:
    """The trainer will run on CUDA: an NVIDIA device is there and not hidden from it."""
    hidden = environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1")
    return device.exists() and not hidden


def flight_recorder_env(environ: Mapping[str, str], run_path: Path, cuda: bool) -> dict[str, str]:
    """The recorder's variables the trainer gets (none off CUDA, none the user already set);
    creates the dump's directory."""
    if not cuda:
        return {}
    prefix = flight_prefix(run_path)
    prefix.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    ours = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": str(TRACE_ENTRIES),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(prefix),
    }
    return {k: v for k, v in ours.items() if k not in environ}
