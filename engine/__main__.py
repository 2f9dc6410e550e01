"""``python -m engine``: the engine's command line (``supervise RUN_DIR``).

People use ``memtui run``; this is what it starts, detached. Torch-free.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine",
        description="memtui engine: the supervisor daemon of one run (started by `memtui run`).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    supervise = commands.add_parser(
        "supervise",
        help="serve a run directory and launch its trainer until the run ends",
        description=(
            "Serve RUN_DIR/engine.sock, launch the trainer (or $MEMTUI_TRAINER_CMD, with the run "
            "dir and --attempt N appended), record everything in RUN_DIR/telemetry.sqlite. "
            "SIGTERM/SIGINT stop the run gracefully; SIGHUP is ignored. One supervisor serves a "
            "run: another started on it exits at once with status 2, naming the one that serves it."
        ),
    )
    supervise.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory (holds run.json)")
    supervise.add_argument(
        "--stop-grace",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds a stopping trainer gets before SIGKILL (default: the run's checkpoint.stop_grace_s)",
    )
    supervise.add_argument(
        "--fresh",
        action="store_true",
        help="let the first trainer start at step 0 if checkpoints exist but none verifies",
    )
    doctor = commands.add_parser(
        "doctor",
        help="survey this machine (software, GPUs via NVML, host) and give a verdict",
        description="The environment doctor: verdict healthy/degraded/unhealthy with reasons; "
        "exit 1 if unhealthy.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--deep",
        action="store_true",
        help="also import torch to ask whether CUDA works, and DeepSpeed which ops can be JIT-built "
        "here (as ds_report; seconds)",
    )
    doctor.add_argument("--run-dir", type=Path, default=None, help="report free disk here (default: cwd)")
    doctor.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="report free disk for checkpoints here (default: RUN_DIR/checkpoints with --run-dir)",
    )
    doctor.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help=RDZV_HELP)
    return parser


RDZV_HELP = "also check that this rendezvous endpoint (torchrun's c10d store on node 0) accepts a connection"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return _doctor(args)
    if args.command != "supervise":
        parser.print_help(sys.stderr)
        return 2
    if not (args.run_dir / "run.json").is_file():
        parser.error(f"{args.run_dir}: not a run directory (no run.json)")
    from engine.run.directory import PRIVATE_UMASK

    os.umask(PRIVATE_UMASK)  # all the run's files 0600, directories 0700, the trainer's too
    from engine.supervisor import entry as supervisor  # here, so `--help` stays instant

    return supervisor.main(args.run_dir, stop_grace_s=args.stop_grace, fresh_start=args.fresh)


def _doctor(args: argparse.Namespace) -> int:
    from engine.doctor.examiner import EnvironmentDoctor, required_ops_of
    from engine.doctor.report_text import render_report

    checkpoints = args.checkpoint_dir
    if checkpoints is None and args.run_dir is not None:
        checkpoints = args.run_dir / "checkpoints"
    doctor = EnvironmentDoctor(
        run_dir=args.run_dir,
        checkpoint_dir=checkpoints,
        check_ops=args.deep,  # a child imports torch and DeepSpeed: seconds
        required_ops=required_ops_of(args.run_dir),
        interconnect=True,
        rdzv_endpoint=args.rdzv_endpoint,
    )
    report = doctor.examine()
    print(report.model_dump_json(indent=2) if args.json else render_report(report))
    return 1 if report.verdict == "unhealthy" else 0


if __name__ == "__main__":
    sys.exit(main())
