"""The prefetcher side by side: the same run with batches built ahead (``train.prefetch =
true``, the default with CUDA) and built on the training thread (``false``, what ``"auto"``,
the default, does on the CPU), interleaved.

    python bench/prefetch.py [--rounds 3] [--steps 60] [--json PATH]

Setups as bench/budget_runs.py names them (``tiny``: the tiny preset's model in fp16 at
global batch 256; ``wide``: 4 layers, d_model 128, sequence 256, fp32 at global batch 64),
each at a micro-batch that leaves four micro-batches a step, so most batches can be built
ahead. Each run is a fresh process through the real ``train()`` (no supervisor); its
figures are over the steps after ``SETTLE_STEPS``: median tokens/s, and the data-wait share
(the step's ``data_wait_s`` over its ``step_time_s``, mean). Printed and written as JSON,
never asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MICRO_BATCH = {"tiny": 64, "wide": 16}  # global 256 and 64: four micro-batches a step
SETTLE_STEPS = 10  # start-up and the first steps' allocations left out

CHILD = """
import json, shutil, sys, tempfile
from pathlib import Path
from bench.budget_runs import SETUPS
from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.trainer import loop
from engine.trainer.link import NullLink

setup, micro, steps, prefetch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
chosen = SETUPS[setup]
config = build_run_config({
    "steps": steps,
    "model": chosen.model,
    "train": {"micro_batch": micro, "global_batch": chosen.global_batch,
              "precision": chosen.precision, "prefetch": prefetch},
    "checkpoint": {"every_steps": 0},
    "eval": {"every_steps": 0},
})
run = RunDir(Path(tempfile.mkdtemp(prefix="mtpf", dir="/tmp")))
run.ensure_layout()
link = NullLink(record=True)
loop.train(config, run, attempt=1, link=link)
shutil.rmtree(run.path, ignore_errors=True)
samples = [m.sample for m in link.sent if getattr(m, "kind", "") == "step"]
print(json.dumps([[s.tokens_per_s, s.step_time_s, s.data_wait_s, s.grad_accum] for s in samples]))
"""


def one_run(setup: str, steps: int, prefetch: bool) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, setup, str(MICRO_BATCH[setup]), str(steps), "1" if prefetch else "0"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"{setup} prefetch={prefetch} failed:\n{done.stderr[-3000:]}")
    rows = json.loads(done.stdout.strip().splitlines()[-1])[SETTLE_STEPS:]
    return {
        "tokens_per_s": statistics.median(r[0] for r in rows),
        "data_wait_share": statistics.fmean(r[2] / r[1] for r in rows if r[1] > 0),
        "grad_accum": rows[-1][3],
        "steps_measured": len(rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--setups", nargs="+", default=["tiny", "wide"], choices=sorted(MICRO_BATCH))
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for setup in args.setups:
            order = (True, False) if round_ % 2 == 0 else (False, True)  # interleaved, alternating
            for prefetch in order:
                figures = one_run(setup, args.steps, prefetch)
                runs.append({"round": round_ + 1, "setup": setup, "prefetch": prefetch, **figures})
                print(
                    f"round {round_ + 1} {setup:5s} prefetch={'on ' if prefetch else 'off'} "
                    f"{figures['tokens_per_s']:10,.0f} tokens/s  data wait {figures['data_wait_share']:6.2%}",
                    flush=True,
                )
    print()
    summary = {}
    for setup in args.setups:
        for prefetch in (True, False):
            mine = [r for r in runs if r["setup"] == setup and r["prefetch"] == prefetch]
            summary[f"{setup} prefetch={'on' if prefetch else 'off'}"] = {
                "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in mine),
                "data_wait_share_median": statistics.median(r["data_wait_share"] for r in mine),
            }
    for name, figures in summary.items():
        print(
            f"{name:22s} {figures['tokens_per_s_median']:10,.0f} tokens/s  "
            f"data wait {figures['data_wait_share_median']:6.2%}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": "python bench/prefetch.py " + " ".join(sys.argv[1:]),
                    "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "machine": f"{platform.machine()}, {platform.python_version()}",
                    "runs": runs,
                    "summary": summary,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
