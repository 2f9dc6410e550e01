"""What an OOM leaves, and what recording the allocator's history costs.

1. Cost (CUDA only): a small transformer's training step timed with the allocator history
   off and on (``torch.cuda.memory._record_memory_history(max_entries=N)``, as
   ``memory.history_entries = N`` does); the median ms per step of each and their ratio,
   and the size of the snapshot it leaves. This is what decides whether the history can
   be on by default.
2. A real OOM through the supervisor and the trainer (``memory.adaptive = false`` under a
   budget too small for the micro-batch; on the CPU ``memory.cpu_enforce``) with
   ``memory.history_entries`` set: the run directory is kept for ``memtui oom`` to list
   (``bench/gpu_check.sh``'s oom-forensics stage does, then removes it).

    python bench/oom_forensics.py --json out.json [--cpu] [--quick]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_oom import GIB, REPO  # noqa: E402

HISTORY_ENTRIES = 100_000
"""Ring size measured (PyTorch's own examples use 100000)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="write the figures here")
    parser.add_argument("--cpu", action="store_true", help="no CUDA: the OOM run only (cpu_enforce)")
    parser.add_argument("--quick", action="store_true", help="the smallest sizes (the test suite's)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds for the OOM run (default 240)")
    return parser.parse_args()


def history_cost(steps: int) -> dict[str, Any]:
    """Median ms per training step with the history off, then on; the snapshot's size."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 6).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randn(16, 512, 1024, device="cuda")

    def timed() -> float:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(batch).float().pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times[2:]) * 1000  # the first steps warm the allocator up

    off = timed()
    torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES)
    on = timed()
    snapshot = Path(tempfile.mkdtemp(prefix="mtsnap")) / "snapshot.pickle"
    started = time.perf_counter()
    torch.cuda.memory._dump_snapshot(str(snapshot))
    dump_s = time.perf_counter() - started
    torch.cuda.memory._record_memory_history(enabled=None)
    size = snapshot.stat().st_size
    snapshot.unlink()
    return {
        "history_entries": HISTORY_ENTRIES,
        "ms_per_step_off": round(off, 3),
        "ms_per_step_on": round(on, 3),
        "ratio": round(on / off, 4),
        "snapshot_bytes": size,
        "dump_s": round(dump_s, 3),
    }


def oom_run(cpu: bool, quick: bool, timeout: float) -> dict[str, Any]:
    """A run that runs out of memory once or more; its directory is left for the caller."""
    from engine.config.config_file import build_run_config
    from engine.run.directory import RunDir

    preset, budget, micro, steps = ("tiny", 0.55, 128, 2 if quick else 4) if cpu else ("small", 1.0, 256, 6)
    raw = {
        "name": "oom-forensics",
        "preset": preset,
        "steps": steps,
        "checkpoint": {"every_steps": 0},
        "train": {"micro_batch": micro, "global_batch": micro, "precision": "fp16", "warmup_steps": 2},
        "memory": {
            "budget": int(budget * GIB),
            "adaptive": False,
            "cpu_enforce": cpu,
            "history_entries": HISTORY_ENTRIES,
        },
    }
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
    return {"home": str(home), "run_dir": str(rundir.path), "exit": done.returncode, "steps": steps}


def main() -> int:
    args = parse_args()
    found: dict[str, Any] = {}
    if not args.cpu:
        found["cost"] = history_cost(steps=12 if args.quick else 30)
        print("history cost:", json.dumps(found["cost"]))
    found["run"] = oom_run(args.cpu, args.quick, args.timeout)
    args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
