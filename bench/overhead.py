"""Orchestration overhead: our training loop vs a bare DeepSpeed loop, same engine.

A = ``loop.run_steps`` as the trainer runs it: directives at the boundary, adaptive memory
(probe, controller, calibration, sample window, OOM guard), a telemetry sample and a
StepReport per step, sent as NDJSON over a real socket (a socketpair drained by another
process, as the supervisor would).
B = ``loop.train_step`` alone on the workload's batches: forward, backward, step; nothing
else (no hook of ours stays on the model between A's steps, so B runs none).
Both drive one engine (same model, batch, precision), alternated in short rounds
(A B, B A, A B, ...) after a warm-up, so drift in the machine's speed hits both alike.
Prints tokens/s by wall clock and by process CPU time (the latter is robust to other
processes competing for the cores), the ratio A/B and the median of the rounds' ratios.
Threads default to what the trainer picks (``loop.share_cpu_cores``: every core on a CPU).

    python bench/overhead.py [--rounds 30] [--steps 20] [--precision fp16] [--preset tiny] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from engine.config.config_file import build_run_config
from engine.cpu_share import SUPERVISOR_NICE
from engine.trainer import loop
from engine.trainer.link import SocketLink
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.ranks.process_group import ensure_single_process_env
from engine.trainer.telemetry.step_telemetry import StepTelemetry
from engine.trainer.training_parts import equip
from engine.trainer.workloads.hf_workload import hf_workload
from engine.trainer.workloads.workload import load_workload


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    parser.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "fp32"])
    parser.add_argument("--zero-stage", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=30, help="A/B pairs (default 30)")
    parser.add_argument(
        "--steps", type=int, default=20, help="optimizer steps per side per round (default 20)"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (default: the trainer's choice)"
    )
    parser.add_argument("--warmup", type=int, default=50, help="untimed steps first (default 50)")
    parser.add_argument("--hf-dir", help="a Hugging Face model directory ([hf] model_dir; seq_len 64)")
    parser.add_argument("--hf-data", help="its dataset ([hf] data: .txt or .jsonl)")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    return parser.parse_args()


def draining_link() -> tuple[SocketLink, subprocess.Popen[bytes]]:
    """A SocketLink whose peer, another process like the supervisor, reads and discards."""
    ours, theirs = socket.socketpair()
    drain = subprocess.Popen(["cat"], stdin=theirs, stdout=subprocess.DEVNULL)
    theirs.close()
    if sys.platform.startswith("linux"):  # below the trainer, as the supervisor runs (cpu_share)
        os.setpriority(os.PRIO_PROCESS, drain.pid, os.getpriority(os.PRIO_PROCESS, 0) + SUPERVISOR_NICE)
    return SocketLink(ours), drain


def timed(fn: Callable[[int], None], steps: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of ``fn(steps)``; CPU time shrugs off other load."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(steps)
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(
    preset: str = "tiny",
    precision: str = "fp16",
    zero_stage: int = 0,
    rounds: int = 30,
    steps: int = 20,
    threads: int = 0,
    warmup: int = 50,
    hf: dict[str, str] | None = None,
) -> dict[str, float]:
    """Ours against bare on one engine in this process, alternated; the figures as a dict
    (``threads`` 0: the trainer's choice, ``loop.share_cpu_cores``). Once per process:
    the engine and torch's threads are the process's."""
    config = build_run_config(
        {
            "preset": preset,
            "steps": 10**9,  # a flat lr for the whole bench
            "train": {"precision": precision, "zero_stage": zero_stage},
            "checkpoint": {"every_steps": 0},
            **({"hf": hf, "model": {"seq_len": 64}} if hf else {}),
        }
    )
    if threads:
        torch.set_num_threads(threads)
    else:
        loop.share_cpu_cores()  # as loop.train does: the figure is for the trainer's threads
    ensure_single_process_env()
    loop.seed_everything(config.seed)
    cache = Path(tempfile.gettempdir()) / "memtui-bench-tokens"
    workload = hf_workload(config, cache) if hf else load_workload(config)
    engine = loop.build_engine(config, workload)
    telemetry = StepTelemetry(engine, MemoryProbe(engine.device), workload.tokens_per_sample, 1, attempt=1)
    link, drain = draining_link()
    training = equip(loop.Training(config, engine, workload, link, telemetry, run=None))

    def ours(steps: int) -> None:
        loop.run_steps(training, until=engine.global_steps + steps)

    def bare(steps: int) -> None:
        for _ in range(steps):
            loop.train_step(engine, workload.batch, engine.global_steps)

    ours(warmup)
    bare(warmup)
    tokens = steps * config.train.global_batch * workload.tokens_per_sample
    seconds = {"ours": [0.0, 0.0], "bare": [0.0, 0.0]}  # name -> [wall, cpu]
    round_ratios: list[list[float]] = [[], []]  # [wall, cpu] -> bare s / ours s, per round
    for round_ in range(rounds):
        order = (("ours", ours), ("bare", bare)) if round_ % 2 == 0 else (("bare", bare), ("ours", ours))
        this = {}
        for name, fn in order:
            this[name] = timed(fn, steps)
            seconds[name][0] += this[name][0]
            seconds[name][1] += this[name][1]
        for i in (0, 1):
            round_ratios[i].append(this["bare"][i] / this["ours"][i])
    link.close()
    drain.wait(timeout=5)
    loop.leave_process_group()
    total = tokens * rounds
    figures: dict[str, float] = {"threads": torch.get_num_threads(), "rounds": rounds, "steps": steps}
    for i, clock in enumerate(("wall", "cpu")):
        figures[f"ours_tok_s_{clock}"] = total / seconds["ours"][i]
        figures[f"bare_tok_s_{clock}"] = total / seconds["bare"][i]
        figures[f"ratio_{clock}"] = seconds["bare"][i] / seconds["ours"][i]
        figures[f"median_round_ratio_{clock}"] = statistics.median(round_ratios[i])
    return figures


def main() -> None:
    args = parse_args()
    hf = {"model_dir": args.hf_dir, "data": args.hf_data} if args.hf_dir else None
    figures = measure(
        args.preset, args.precision, args.zero_stage, args.rounds, args.steps, args.threads, args.warmup, hf
    )
    for clock in ("wall", "cpu"):
        print(
            f"{args.preset} {args.precision} zero {args.zero_stage}, {figures['threads']:.0f} threads, "
            f"{args.rounds} x {args.steps} steps each, "
            f"{clock} clock: ours {figures[f'ours_tok_s_{clock}']:,.0f} tok/s, "
            f"bare {figures[f'bare_tok_s_{clock}']:,.0f} tok/s, "
            f"ratio {figures[f'ratio_{clock}']:.3f} (target >= 0.97), "
            f"median of rounds {figures[f'median_round_ratio_{clock}']:.3f}"
        )
    if args.json:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        args.json.write_text(
            json.dumps({**figures, "preset": args.preset, "precision": args.precision, "device": device})
        )


if __name__ == "__main__":
    main()
