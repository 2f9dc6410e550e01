"""Training stall per checkpoint: sealed in line (synchronous) vs in the background.

    python bench/checkpoint_stall.py [--preset tiny] [--steps 400] [--every 20] [--rounds 2]

Each round trains the preset twice through the real ``train()`` (no supervisor), once per
``checkpoint.background`` setting, each in its own process, alternating. A save every
``--every`` steps gives many saves; the stall is what the ``checkpoint_saved`` event
reports (the time training waited). Prints, per mode: median stall and its parts, median
step time, the stall as a share of run time at the bench's cadence and at the default
cadence before ``"auto"`` (``checkpoint.every_steps`` = 500), and the wall clock of the steps (saves and any
slow-down by the seal thread included). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_EVERY = 500  # the fixed interval before every_steps = "auto" became the default


def one(preset: str, steps: int, every: int, background: bool) -> dict[str, Any]:
    """Train once in this process; the figures as a dict."""
    from engine.config.config_file import build_run_config
    from engine.run.directory import RunDir
    from engine.trainer import loop
    from engine.trainer.link import NullLink

    config = build_run_config(
        {"preset": preset, "steps": steps, "checkpoint": {"every_steps": every, "background": background}}
    )
    root = Path(tempfile.mkdtemp(prefix="mtstall", dir="/tmp"))
    try:
        run = RunDir(root)
        run.ensure_layout()
        link = NullLink(record=True)
        loop.train(config, run, attempt=1, link=link)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sent = link.sent or []
    samples = [m.sample for m in sent if getattr(m, "kind", "") == "step"]
    saves = [m.data for m in sent if getattr(m, "type", "") == "checkpoint_saved"]
    periodic = [s for s in saves if s["step"] % every == 0 and s["step"] != steps]  # not the final
    times = [s.step_time_s for s in samples]
    return {
        "stall_s": [s["seconds"] for s in periodic],
        "write_s": [s["write_s"] for s in periodic],
        "seal_s": [s["seal_s"] for s in periodic],
        "size_bytes": saves[-1]["size_bytes"] if saves else 0,
        "step_s": statistics.median(times),
        "steps_wall_s": samples[-1].ts - samples[0].ts,
    }


def spawn(args: argparse.Namespace, background: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--one", "background" if background else "sync"]
    command += ["--preset", args.preset, "--steps", str(args.steps), "--every", str(args.every)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(mode: str, runs: list[dict[str, Any]], every: int) -> None:
    stall = statistics.median(s for r in runs for s in r["stall_s"])
    write = statistics.median(s for r in runs for s in r["write_s"])
    seal = statistics.median(s for r in runs for s in r["seal_s"])
    step = statistics.median(r["step_s"] for r in runs)
    wall = statistics.median(r["steps_wall_s"] for r in runs)
    saves = sum(len(r["stall_s"]) for r in runs)
    print(
        f"{mode:10} stall median {stall * 1e3:7.1f} ms (write {write * 1e3:.1f}, seal {seal * 1e3:.1f}) "
        f"over {saves} saves; step {step * 1e3:.1f} ms; "
        f"share of run time: {stall / (every * step):.2%} every {every} steps, "
        f"{stall / (DEFAULT_EVERY * step):.3%} every {DEFAULT_EVERY}; steps' wall {wall:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=20, help="save every N steps (default 20)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", choices=["sync", "background"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.preset, args.steps, args.every, args.one == "background")))
        return
    results: dict[str, list[dict[str, Any]]] = {"sync": [], "background": []}
    started = time.perf_counter()
    for _ in range(args.rounds):
        for mode in ("sync", "background"):
            results[mode].append(spawn(args, mode == "background"))
    size = results["sync"][0]["size_bytes"]
    print(
        f"{args.preset}: {args.steps} steps x {args.rounds} rounds per mode, a save every {args.every} "
        f"steps, {size / 1e6:.1f} MB per checkpoint ({time.perf_counter() - started:.0f} s)"
    )
    for mode, runs in results.items():
        report(mode, runs, args.every)


if __name__ == "__main__":
    main()
