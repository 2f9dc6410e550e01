"""The capacity plan against real runs on the CPU, and ``memtui plan``'s wall time.

    python bench/plan_accuracy.py [--presets tiny small] [--stages 0 1 2 3] [--steps 12] [--json PATH]
    python bench/plan_accuracy.py --homes /tmp/plan-acc-*     # measure runs it made before

For each preset and ZeRO stage: a real run through the CLI (``memtui run --detach`` in a
private MEMTUI_HOME, fixed micro-batch: ``memory.adaptive = false``), waited for to the end,
then ``memtui plan RUN --json``: the run's measured step peak (the trainer's RSS after a
forward, the CPU's stand-in for device memory) beside the plan's predicted peak at the same
micro-batch, and their ratio (predicted / measured: above 1 the plan is cautious). Then
``memtui plan --json`` timed in fresh processes (median of 5) and checked not to import torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MEMTUI = [sys.executable, "-m", "memtui.cli.main"]
ENDED = ("completed", "failed", "stopped", "interrupted")


def memtui(env: dict[str, str], *argv: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMTUI, *argv], capture_output=True, text=True, env=env, timeout=timeout)


def run_case(preset: str, stage: int, steps: int) -> dict[str, Any]:
    """A real run in a fresh MEMTUI_HOME to its end, then its measured peak against the plan."""
    home = tempfile.mkdtemp(prefix="plan-acc-")
    env = dict(os.environ, MEMTUI_HOME=home)
    name = f"{preset}-z{stage}"
    started = memtui(
        env,
        "run",
        "--preset",
        preset,
        "--steps",
        str(steps),
        "--name",
        name,
        "--detach",
        "--set",
        f"train.zero_stage={stage}",
        "--set",
        "memory.adaptive=false",
        "--set",
        "checkpoint.every_steps=0",
    )
    if started.returncode != 0:
        return {"preset": preset, "zero_stage": stage, "error": started.stderr.strip()}
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline and measure_case(Path(home))["state"] not in ENDED:
        time.sleep(2)
    return measure_case(Path(home))


def measure_case(home: Path) -> dict[str, Any]:
    """The one run in ``home``: its state, and ``memtui plan RUN``'s measured against predicted."""
    env = dict(os.environ, MEMTUI_HOME=str(home))
    status = memtui(env, "status", "--json")
    doc = json.loads(status.stdout) if status.returncode == 0 else {}
    name = doc.get("name", "?")
    preset, _, stage = name.rpartition("-z")
    planned = memtui(env, "plan", doc.get("run_id", "?"), "--json") if doc.get("state") in ENDED else None
    measured = json.loads(planned.stdout)["measured"] if planned and planned.returncode == 0 else None
    return {
        "preset": preset,
        "zero_stage": int(stage) if stage.isdigit() else None,
        "state": doc.get("state", "?"),
        "measured": measured,
        "mfu": doc.get("mfu"),
        "model_tflops": doc.get("model_tflops"),
    }


def plan_wall_time(rounds: int = 5) -> dict[str, Any]:
    code = (
        "import contextlib, io, sys, time\n"
        "t = time.perf_counter()\n"
        "from memtui.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--json'])\n"
        "print(time.perf_counter() - t, 'torch' in sys.modules)\n"
    )
    inner, outer = [], []
    torch_seen = False
    for _ in range(rounds):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        outer.append(time.perf_counter() - t)
        seconds, seen = done.stdout.split()
        inner.append(float(seconds))
        torch_seen |= seen == "True"
    return {
        "plan_s_in_process": statistics.median(inner),
        "plan_s_with_interpreter": statistics.median(outer),
        "torch_imported": torch_seen,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--stages", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--homes", nargs="+", type=Path, help="measure the runs already made in these MEMTUI_HOMEs (one each)"
    )
    args = parser.parse_args()
    if args.homes:
        cases = sorted((measure_case(h) for h in args.homes), key=lambda c: (c["preset"], c["zero_stage"]))
    else:
        cases = [run_case(p, s, args.steps) for p in args.presets for s in args.stages]
    timing = plan_wall_time()
    print(
        f"{'case':<10} {'state':<10} {'micro-batch':>11} {'measured':>10} {'predicted':>10} {'ratio':>6}  mfu"
    )
    for case in cases:
        m = case.get("measured")
        label = f"{case['preset']} z{case['zero_stage']}"
        if not m:
            print(f"{label:<10} {case.get('state', case.get('error', '?'))}")
            continue
        mfu = f"{case['mfu']:.2%}" if case.get("mfu") is not None else "—"
        print(
            f"{label:<10} {case['state']:<10} {m['micro_batch']:>11} {m['measured_peak'] / 2**20:>7.0f} MiB "
            f"{m['predicted_peak'] / 2**20:>6.0f} MiB {m['ratio']:>6.2f}  {mfu}"
        )
    print(
        f"memtui plan --json: {timing['plan_s_in_process'] * 1000:.0f} ms in process, "
        f"{timing['plan_s_with_interpreter'] * 1000:.0f} ms with the interpreter's start "
        f"(median of 5); torch imported: {timing['torch_imported']}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"cases": cases, "plan_time": timing, "date": time.strftime("%F")}, indent=2)
        )


if __name__ == "__main__":
    main()
