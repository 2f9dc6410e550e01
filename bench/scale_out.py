"""Scale-out figures: tokens/s at 1 rank, 2 ranks on one node and 2 "nodes", same global
batch, through the real supervisors; and what memtui's own per-step agreement costs.

    python bench/scale_out.py [--steps 200] [--rounds 2]

Each setting is a ``tiny`` run (ZeRO-2, global batch 16, fp16, no checkpoints) started with
``python -m engine supervise``: one supervisor for 1 rank and for 2 ranks (torchrun
--standalone), two supervisors with one rank each for 2 nodes (static rendezvous on
loopback, a shared checkpoint directory). Settings alternate within each round. Figures
come from node 0's store: the median tokens/s and step time over the last half of the steps.

The agreement share: at every optimizer-step boundary the ranks all-reduce a few int64
twice (``RankLink.sync``: stop, pause, directives; the adaptive controller's readings), and
every ``rank_report_every`` steps all-gather their memory. bench/rank_agreement.py times
one such all-reduce on 2 gloo processes; the share is 2 x that median over the 2-node
run's median step time (stated as an estimate from the two measurements).

On a 2-core machine two ranks share the cores (OMP threads split), so 2 ranks measure the
coordination's cost, not a speed-up.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = ("1 rank", "2 ranks, 1 node", "2 nodes x 1 rank")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_dirs(setting: str, steps: int, scratch: Path) -> list[Path]:
    from engine.config.config_file import build_run_config
    from engine.run.directory import RunDir

    train = {"global_batch": 16, "zero_stage": 2, "micro_batch": 8}
    base = {"name": "scale", "steps": steps, "checkpoint": {"every_steps": 0}}
    if setting == "1 rank":
        configs = [{**base, "train": {**train, "micro_batch": 16}}]
    elif setting == "2 ranks, 1 node":
        configs = [{**base, "train": {**train, "ranks": 2}}]
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        nodes = {"nodes": 2, "rdzv_endpoint": endpoint}
        checkpoint = {"every_steps": 0, "dir": str(scratch / "shared")}
        configs = [
            {**base, "checkpoint": checkpoint, "train": {**train, **nodes, "node_rank": k}} for k in (0, 1)
        ]
    return [
        RunDir.create(build_run_config(raw), home=scratch / f"n{i}").path for i, raw in enumerate(configs)
    ]


def run_setting(setting: str, steps: int) -> dict[str, float]:
    from engine.run.directory import RunDir
    from engine.run.storage.store import Store

    scratch = Path(tempfile.mkdtemp(prefix="mtsc", dir="/tmp"))
    try:
        dirs = run_dirs(setting, steps, scratch)
        started = time.monotonic()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "engine", "supervise", os.fspath(d)],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for d in dirs
        ]
        for proc in procs:
            proc.wait(timeout=1800)
        wall = time.monotonic() - started
        with Store(RunDir(dirs[0]).store, readonly=True) as store:
            samples = store.steps()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    late = samples[len(samples) // 2 :]
    return {
        "tokens_per_s": statistics.median(s.tokens_per_s for s in late),
        "step_ms": 1000 * statistics.median(s.step_time_s for s in late),
        "wall_s": wall,
        "world": float(late[-1].world_size),
    }


def agreement_us() -> float:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "rank_agreement.py"), "--calls", "2000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    found = re.search(r"median (\d+) us", done.stdout)
    if found is None:
        raise RuntimeError(f"rank_agreement.py printed no median: {done.stdout}{done.stderr}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    for round_ in range(args.rounds):
        order = SETTINGS if round_ % 2 == 0 else tuple(reversed(SETTINGS))
        for setting in order:
            results[setting].append(run_setting(setting, args.steps))
    print(f"tiny, ZeRO-2, global batch 16, {args.steps} steps, {args.rounds} rounds (median of rounds)")
    for setting in SETTINGS:
        tok = statistics.median(r["tokens_per_s"] for r in results[setting])
        ms = statistics.median(r["step_ms"] for r in results[setting])
        wall = statistics.median(r["wall_s"] for r in results[setting])
        print(f"  {setting:<18} {tok / 1000:6.1f}k tokens/s  step {ms:6.1f} ms  launch to end {wall:5.1f} s")
    per_call = agreement_us()
    step_ms = statistics.median(r["step_ms"] for r in results[SETTINGS[2]])
    share = 2 * per_call / 1000 / step_ms
    print(f"  agreement: all-reduce median {per_call:.0f} us x 2 per step = {share:.2%} of a 2-node step")


if __name__ == "__main__":
    main()
