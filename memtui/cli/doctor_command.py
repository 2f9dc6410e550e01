"""``memtui doctor [--json] [--deep]``: the command line of the environment doctor.

The report itself, and why ``--deep`` runs in a child process, is ``memtui.cli.doctor_report``.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    """Register ``doctor`` on ``memtui``'s subparsers."""
    doctor = sub.add_parser(
        "doctor",
        help="check this machine before a run: software, GPUs, host; verdict with reasons",
        description=(
            "The environment doctor: Python, torch and its CUDA build, the driver, DeepSpeed, "
            "GPUs via NVML, host CPU/RAM/disk, the interconnect (InfiniBand, NCCL settings). "
            "Verdict healthy, degraded or unhealthy with "
            "reasons; exit 1 only if unhealthy. No GPU or no NVML is a reason, never an error."
        ),
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--deep",
        action="store_true",
        help="also ask torch whether CUDA works, and DeepSpeed which ops are pre-built or can be "
        "JIT-built here (slower: child processes)",
    )
    doctor.add_argument(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        default=None,
        help="also check that a multi-node run's rendezvous endpoint (torchrun's c10d store on node 0) "
        "accepts a TCP connection; InfiniBand ports and NCCL variables are always reported",
    )
    doctor.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from memtui.cli.doctor_report import run_doctor

    return run_doctor(as_json=args.json, deep=args.deep, rdzv_endpoint=args.rdzv_endpoint)
