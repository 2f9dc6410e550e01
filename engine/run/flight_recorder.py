"""NCCL's flight recorder on by default for CUDA runs, its dump kept in the run directory.

torch's ProcessGroupNCCL keeps a ring of the recent collectives per rank when
``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0, and with ``TORCH_NCCL_DUMP_ON_TIMEOUT`` writes it when
a collective times out, to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + the rank: which collective
each rank last entered, so a hang names the rank that never arrived. ProcessGroupNCCL reads
them when it is made, so each trainer process sets them in its own environment just before
it joins its process group, when torch says CUDA is there (a user's own values win): the
decision is CUDA's own, not a guess from a device file (``/dev/nvidia0`` exists in
containers without a usable GPU, and not under every driver). gloo (the CPU) has no recorder.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from engine.run.stack_files import flight_prefix

TRACE_ENTRIES = 2000
"""Collectives each rank's ring keeps (a few hundred bytes each: well under 1 MB per rank)."""


def flight_recorder_env(environ: Mapping[str, str], run_path: Path, cuda: bool) -> dict[str, str]:
    """The recorder's variables a trainer sets for itself (none off CUDA, none the user already
    set); creates the dump's directory."""
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
