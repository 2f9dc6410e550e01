"""``memtui doctor [RUN] [--json] [--deep]``: the command line of the environment doctor; and
``memtui prepare [CONFIG] [--json]``, which builds ahead the DeepSpeed ops a run's config needs.

The report itself, and why ``--deep`` runs in a child process, is ``memtui.cli.doctor.doctor_report``.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from memtui.cli.arguments import endpoint


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
    doctor.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        default=None,
        help="also check this run: its store (SQLite's quick_check), its checkpoints (quick "
        "verification) and whether a supervisor serves it; a damaged store makes the verdict unhealthy",
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
        type=endpoint,
        default=None,
        help="also check that a multi-node run's rendezvous endpoint (torchrun's c10d store on node 0) "
        "accepts a TCP connection; InfiniBand ports and NCCL variables are always reported",
    )
    doctor.set_defaults(handler=cmd_doctor)
    prepare = sub.add_parser(
        "prepare",
        help="build the DeepSpeed ops a run's config needs here, ahead of its first run",
        description=(
            "A default run needs no DeepSpeed op, so no compiler: memtui's optimizer is torch's "
            "AdamW, and the shared-memory op DeepSpeed's CPU backend would build serves inference "
            "only (the trainer declines it). A deepspeed_config that asks for DeepSpeed's own "
            "optimizer (torch_adam = false: cpu_adam when offloaded, fused_adam on a GPU) needs "
            "its op, which DeepSpeed builds the first time an environment uses it (a C++ compile "
            "of a minute or more) into this Python environment's own extension cache "
            "(~/.cache/memtui/torch_extensions/<environment>/, or TORCH_EXTENSIONS_DIR when "
            "set), where every trainer of this environment finds it. This builds them now, in a "
            "child process, so that no run pays for it; ops already built are only loaded. Exit 2 "
            "when the config is wrong or an op must be built and there is no C++ compiler."
        ),
    )
    prepare.add_argument(
        "config",
        nargs="?",
        metavar="CONFIG",
        default=None,
        help="the run's TOML config (default: memtui's defaults, which need no op)",
    )
    prepare.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the ops, each with its cache dir and whether it was built, "
        "and the error if any",
    )
    prepare.set_defaults(handler=cmd_prepare)


def cmd_doctor(args: argparse.Namespace) -> int:
    from memtui.cli.doctor.doctor_report import run_doctor
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=False, prefer_live=True) if args.run is not None else None
    return run_doctor(as_json=args.json, deep=args.deep, run=run, rdzv_endpoint=args.rdzv_endpoint)


def cmd_prepare(args: argparse.Namespace) -> int:
    """Run ``python -m engine.trainer.op_cache`` (torch and DeepSpeed: a child of ours); its exit
    status (2: the config, or no compiler for an op to build) is ours."""
    import subprocess
    import sys

    if not args.json:
        print("loading the DeepSpeed ops this run needs, building any this machine lacks...", file=sys.stderr)
    command = [sys.executable, "-m", "engine.trainer.op_cache"]
    command += ["--config", str(args.config)] if args.config is not None else []
    command += ["--json"] if args.json else []
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)  # stderr: as it comes
    print(done.stdout, end="", flush=True)
    return done.returncode if done.returncode >= 0 else 1  # killed by a signal: failed
