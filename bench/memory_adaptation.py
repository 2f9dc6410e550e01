"""Adaptive memory under a budget, on one engine: settled throughput and OOM recovery time.

1. Sweep: the engine runs ``--steps`` optimizer steps at each static micro-batch (global
   batch fixed), measuring the per-step peak (CPU: RSS after each forward) and tokens/s by
   process CPU time (robust to other load on the machine).
2. Budget: the static peak of ``--fit`` (default 8) divided by 0.8, so the micro-batches
   above it do not fit (their peak would cross warn or the budget).
3. Adaptive: the same engine from the oversized configured micro-batch under that budget,
   ``memory.cpu_enforce`` on (an RSS over the budget after a forward raises MemoryError,
   as CUDA's allocator would under set_per_process_memory_fraction), through
   ``loop.run_steps``. Reports the micro-batch it settles at, its tokens/s over the last
   ``--steps`` steps against the best static micro-batch that fits (target >= 95%), and the
   time from each OOM to the next completed optimizer step.

    python bench/memory_adaptation.py [--steps 15] [--fit 8]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from engine.config_file import build_run_config
from engine.memory.controller import Policy
from engine.trainer import loop
from engine.trainer.geometry import apply_geometry
from engine.trainer.link import NullLink
from engine.trainer.memory_probe import MemoryProbe
from engine.trainer.oom_injection import INJECT_OOM_ENV
from engine.trainer.oom_recovery import release_memory
from engine.trainer.process_group import ensure_single_process_env
from engine.trainer.sample_window import SampleWindow
from engine.trainer.step_telemetry import StepTelemetry
from engine.trainer.workload import load_workload

MODEL = {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 256}
GLOBAL_BATCH = 64


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=15, help="measured steps per setting (default 15)")
    parser.add_argument(
        "--fit", type=int, default=16, help="largest micro-batch the budget allows (default 16)"
    )
    parser.add_argument(
        "--adaptive-steps", type=int, default=80, help="steps of the adaptive run (default 80)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    raw = {
        "steps": 10**9,
        "model": MODEL,
        "train": {"micro_batch": GLOBAL_BATCH, "global_batch": GLOBAL_BATCH, "precision": "fp32"},
        "checkpoint": {"every_steps": 0},
        # On the CPU the process's RSS (~0.8 GiB of torch and heap) dwarfs the activations,
        # so the levels sit close together; on a GPU the defaults (0.85/0.95/0.70) suit.
        "memory": {
            "steady_steps": 5,
            "cooldown_steps": 10,
            "warn": 0.93,
            "critical": 0.98,
            "grow_below": 0.9,
        },
    }
    config = build_run_config(raw)
    ensure_single_process_env()
    loop.seed_everything(config.seed)
    workload = load_workload(config)
    engine = loop.build_engine(config, workload)
    probe = MemoryProbe(engine.device)
    workload.model.register_forward_hook(lambda *_: None if probe.note() else None)  # None: keep the output
    batch = SampleWindow(workload.batch, config.train.micro_batch)
    tokens_per_step = GLOBAL_BATCH * config.model.seq_len
    policy = Policy(global_batch=GLOBAL_BATCH, max_micro_batch=GLOBAL_BATCH)

    static: dict[int, tuple[float, int]] = {}  # micro-batch -> (tokens/s by CPU time, peak bytes)
    for micro_batch in policy.micro_batches():  # ascending: RSS rarely shrinks
        if micro_batch < 2:
            continue  # slow and never the best
        apply_geometry(engine, policy.geometry(micro_batch))
        loop.train_step(engine, batch, int(engine.global_steps))  # warm-up
        peak = 0
        cpu = time.process_time()
        for _ in range(args.steps):
            probe.begin_step()
            loop.train_step(engine, batch, int(engine.global_steps))
            peak = max(peak, probe.step_peak())
        rate = args.steps * tokens_per_step / (time.process_time() - cpu)
        static[micro_batch] = (rate, peak)
        print(f"static micro-batch {micro_batch:3d}: {rate:9,.0f} tok/s (cpu), peak {peak / 2**20:7.1f} MiB")

    # Between the peaks of --fit and the next size up: --fit is the largest that fits.
    budget = int((static[args.fit][1] + static[2 * args.fit][1]) / 2 / 0.93)
    fitting = {m: v for m, v in static.items() if v[1] <= 0.93 * budget}
    best_m, (best_rate, _) = max(fitting.items(), key=lambda kv: kv[1][0])
    print(
        f"budget {budget / 2**20:.1f} MiB: best static micro-batch that fits is {best_m} "
        f"({best_rate:,.0f} tok/s)"
    )

    # The adaptive run: back to the oversized configured geometry, budget enforced.
    apply_geometry(engine, policy.geometry(GLOBAL_BATCH))
    release_memory()  # the sweep's freed heap back to the OS: RSS is the CPU stand-in
    adaptive_config = build_run_config(
        {**raw, "memory": {**raw["memory"], "budget": budget, "cpu_enforce": True}}
    )
    link = NullLink(record=True)
    telemetry = StepTelemetry(engine, probe, workload.tokens_per_sample, 1, attempt=1)
    training = loop.Training(adaptive_config, engine, workload, link, telemetry, run=None)
    # One unforeseen OOM mid-window, 20 steps in (after the controller has settled).
    os.environ[INJECT_OOM_ENV] = f"{int(engine.global_steps) + 20}:1:backward"
    training.memory = loop.attach_memory(training)
    recoveries = time_recoveries(training)
    start = int(engine.global_steps)
    settle = start + args.adaptive_steps - args.steps
    loop.run_steps(training, until=settle)
    cpu = time.process_time()
    loop.run_steps(training, until=settle + args.steps)
    rate = args.steps * tokens_per_step / (time.process_time() - cpu)
    events = [m for m in link.sent or [] if getattr(m, "type", "") == "memory_adapted"]
    for event in events:
        print(f"  {event.message}")
    settled = int(engine.train_micro_batch_size_per_gpu())
    print(
        f"adaptive: settled at micro-batch {settled}, {rate:,.0f} tok/s = "
        f"{rate / best_rate:.1%} of the best static (target >= 95%)"
    )
    for seconds in recoveries:
        print(f"OOM -> next completed step: {seconds * 1000:.0f} ms")
    loop.leave_process_group()


def time_recoveries(training: loop.Training) -> list[float]:
    """Wall seconds from each OOM to the end of the step that redid its window."""
    memory = training.memory
    assert memory is not None
    found: list[float] = []
    recover, run_step = memory._recover, memory.run_step
    pending: list[float] = []

    def timed_recover(err: BaseException, step: int) -> bool:
        pending.append(time.perf_counter())
        return recover(err, step)

    def timed_run_step(*a: object) -> torch.Tensor | None:
        loss = run_step(*a)  # type: ignore[arg-type]
        if pending:
            found.append(time.perf_counter() - pending[0])
            pending.clear()
        return loss

    memory._recover = timed_recover  # type: ignore[method-assign]
    memory.run_step = timed_run_step  # type: ignore[method-assign]
    return found


if __name__ == "__main__":
    main()
