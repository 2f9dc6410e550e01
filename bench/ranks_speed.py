"""Steps/s of the tiny run at 1 and at N data-parallel ranks (torchrun), same global batch.

Each setting runs through the real supervisor (``python -m engine supervise``); figures come
from the stored telemetry: the median step time and the median tokens/s of the last half of
the steps (start-up excluded), and the wall time from launch to the last step.

    python bench/ranks_speed.py [--steps 300] [--ranks 2] [--zero-stage 1]

On a 2-core machine two ranks share the cores (one torch thread each), so this measures
the coordination's cost (memtui's per-step agreement plus DeepSpeed's gradient
all-reduce over gloo), not a speed-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_once(ranks: int, steps: int, zero_stage: int) -> dict[str, float]:
    from engine.config.config_file import build_run_config
    from engine.run.directory import RunDir
    from engine.run.storage.store import Store

    raw = {
        "name": f"speed{ranks}",
        "steps": steps,
        "checkpoint": {"every_steps": 0},
        "train": {"ranks": ranks, "global_batch": 16, "micro_batch": 16 // ranks, "zero_stage": zero_stage},
    }
    home = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))
    run = RunDir.create(build_run_config(raw), home=home)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "engine", "supervise", os.fspath(run.path)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=1800,
    )
    wall = time.monotonic() - started
    with Store(run.store, readonly=True) as store:
        samples = store.steps()
    late = samples[len(samples) // 2 :]
    return {
        "step_ms": 1000 * statistics.median(s.step_time_s for s in late),
        "tokens_per_s": statistics.median(s.tokens_per_s for s in late),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--zero-stage", type=int, default=1)
    args = parser.parse_args()
    for ranks in (1, args.ranks):
        figures = run_once(ranks, args.steps, args.zero_stage)
        print(
            f"ranks={ranks} zero={args.zero_stage}: median step {figures['step_ms']:.1f} ms, "
            f"{figures['tokens_per_s'] / 1000:.1f}k tokens/s, launch to end {figures['wall_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
