"""Real CUDA OOMs under ``set_per_process_memory_fraction``, recovered; predicted vs measured.

A prepared check for a GPU machine (the Adaptive memory issue); on a machine without CUDA
it says so and exits 2. Two real runs through the real supervisor and trainer:

1. ``memory.adaptive = false`` under a budget far below what the configured micro-batch
   needs: the allocator (capped by ``set_per_process_memory_fraction``) raises
   ``torch.cuda.OutOfMemoryError`` inside forward/backward; the window is thrown away and
   redone at a smaller micro-batch until it fits. Printed: every ``memory_adapted`` event
   and the time from each OOM to the next completed step.
2. ``memory.adaptive = true`` under the same budget: the controller shrinks before the
   allocator fails. Printed: per step, the micro-batch, the model's predicted peak and
   ``max_memory_allocated`` for that step (``mem_step_peak``), and their ratio.

    python bench/cuda_oom.py [--budget-gib 1.0] [--steps 30] [--zero-stage 2 --overlap-comm]
    python bench/cuda_oom.py --cpu --preset tiny --budget-gib 0.55 --micro-batch 128 --steps 8

``--zero-stage`` picks the ZeRO stage (0-2: the OOM is redone in place; 3: the trainer is
restarted), ``--overlap-comm`` sets DeepSpeed's ``zero_optimization.overlap_comm`` (reductions
on a side stream while a window may be thrown away), ``--only oom|predict`` runs one of the
two, ``--json PATH`` writes the figures as one JSON document.

``--cpu`` rehearses the script without a GPU: ``memory.cpu_enforce`` makes an RSS over the
budget after a forward raise MemoryError, as the capped CUDA allocator would.

On a GPU host this runs inside ``bench/gpu_check.sh`` (one call: it installs the wheelhouse
``bench/gpu_wheels.sh`` built, then runs this at every ZeRO stage among its other checks).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
HALTING_EVENTS = ("memory_exhausted", "trainer_error")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-gib", type=float, default=1.0, help="memory.budget in GiB (default 1.0)")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run (default 30)")
    parser.add_argument("--micro-batch", type=int, default=256, help="configured micro-batch (default 256)")
    parser.add_argument("--preset", default="small", help="model preset (default small)")
    parser.add_argument("--cpu", action="store_true", help="rehearse on the CPU (memory.cpu_enforce)")
    parser.add_argument("--zero-stage", type=int, default=0, choices=range(4), help="ZeRO stage (default 0)")
    parser.add_argument("--overlap-comm", action="store_true", help="zero_optimization.overlap_comm on")
    parser.add_argument("--only", choices=["oom", "predict"], help="run one of the two runs")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    return parser.parse_args()


def run(raw: dict[str, Any], timeout: float) -> tuple[list[Any], list[Any]]:
    """One run through ``python -m engine supervise``; its (steps, events) from the store
    (the scratch home is removed after)."""
    from engine.config.config_file import build_run_config
    from engine.run.directory import RunDir
    from engine.run.storage.store import Store

    home = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))
    rundir = RunDir.create(build_run_config(raw), home=home)
    done = subprocess.run(
        [sys.executable, "-m", "engine", "supervise", os.fspath(rundir.path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
    try:
        with Store(rundir.store, readonly=True) as store:
            return store.steps(), store.events_since(0)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def config(args: argparse.Namespace, adaptive: bool) -> dict[str, Any]:
    micro = args.micro_batch
    return {
        "name": "cuda-oom",
        "preset": args.preset,
        "steps": args.steps,
        "checkpoint": {"every_steps": 0},
        "train": {
            "micro_batch": micro,
            "global_batch": micro,
            "precision": "fp16",
            "warmup_steps": 5,
            "zero_stage": args.zero_stage,
        },
        "memory": {"budget": int(args.budget_gib * GIB), "adaptive": adaptive, "cpu_enforce": args.cpu},
        **({"deepspeed_config": {"zero_optimization": {"overlap_comm": True}}} if args.overlap_comm else {}),
    }


def figures(steps: list[Any], events: list[Any]) -> dict[str, Any]:
    """One run's figures: steps reached, OOMs recovered, restarts, events by type, and the
    predicted/measured peak ratios (predicted over ``mem_step_peak``)."""
    counts: dict[str, int] = {}
    for event in events:
        counts[event.type] = counts.get(event.type, 0) + 1
    ooms = [e for e in events if e.type == "memory_adapted" and e.data.get("kind") == "oom"]
    ratios = [s.mem_predicted / s.mem_step_peak for s in steps if s.mem_predicted and s.mem_step_peak]
    return {
        "last_step": steps[-1].step if steps else 0,
        "micro_batches": sorted({s.micro_batch for s in steps}),
        "ooms": len(ooms),
        "oom_messages": [e.message[:200] for e in ooms[:5]],
        "restarts": counts.get("trainer_restarted", 0),
        "exhausted": [e.message[:200] for e in events if e.type == "memory_exhausted"],
        "trainer_errors": [e.message[:200] for e in events if e.type == "trainer_error"][:5],
        "event_counts": counts,
        "peak_ratio": (
            {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)} if ratios else None
        ),
        "mem_step_peak_max": max((s.mem_step_peak or 0 for s in steps), default=0),
    }


def report_ooms(steps: list[Any], events: list[Any]) -> None:
    ooms = [e for e in events if e.type == "memory_adapted" and e.data.get("kind") == "oom"]
    print(f"OOMs recovered: {len(ooms)}")
    for event in ooms:
        after = next((s for s in steps if s.ts > event.ts), None)
        gap = f"{after.ts - event.ts:.3f} s to step {after.step}" if after else "no step after it"
        print(f"  step {event.data['step']}: {event.message[:160]} ({gap})")
    halted = [e for e in events if e.type in HALTING_EVENTS]
    for event in halted:
        print(f"  {event.type}: {event.message[:200]}")


def report_prediction(steps: list[Any]) -> None:
    print("step  micro  predicted_MiB  measured_MiB  predicted/measured")
    for s in steps:
        if s.mem_predicted and s.mem_step_peak:
            ratio = s.mem_predicted / s.mem_step_peak
            mib = 1 << 20
            print(
                f"{s.step:4d}  {s.micro_batch:5d}  {s.mem_predicted / mib:13.0f}  "
                f"{s.mem_step_peak / mib:12.0f}  {ratio:18.2f}"
            )


def main() -> int:
    import torch

    args = parse_args()
    if not torch.cuda.is_available() and not args.cpu:
        print("no CUDA device here: this check needs a GPU machine (or --cpu)", file=sys.stderr)
        return 2
    device = "CPU (rehearsal)" if args.cpu else torch.cuda.get_device_name()
    overlap = ", overlap_comm" if args.overlap_comm else ""
    print(
        f"{device}, torch {torch.__version__}, budget {args.budget_gib} GiB, ZeRO {args.zero_stage}{overlap}"
    )
    found: dict[str, Any] = {
        "device": device,
        "zero_stage": args.zero_stage,
        "overlap_comm": args.overlap_comm,
    }
    if args.only in (None, "oom"):
        print("== 1. adaptive off: the allocator's OOMs, recovered")
        steps, events = run(config(args, adaptive=False), args.timeout)
        report_ooms(steps, events)
        found["oom"] = figures(steps, events)
    if args.only in (None, "predict"):
        print("== 2. adaptive on: predicted peak against max_memory_allocated")
        steps, events = run(config(args, adaptive=True), args.timeout)
        report_prediction(steps)
        report_ooms(steps, events)
        found["predict"] = figures(steps, events)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
