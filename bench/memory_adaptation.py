"""Adaptive memory under a budget, on one engine: the controller with the defaults a user
gets, against every static micro-batch and against a retry-and-halve loop.

1. Sweep: the engine runs ``--steps`` optimizer steps at each static micro-batch (global
   batch fixed), measuring the per-step peak (CPU: RSS after each forward) and samples/s
   by process CPU time (robust to other load on the machine).
2. Budget: halfway between the static peaks of ``--fit`` and twice it, so ``--fit`` is the
   largest micro-batch that fits.
3. Adaptive: the same engine from the oversized configured micro-batch under that budget,
   ``memory.cpu_enforce`` on (an RSS over the budget after a forward raises MemoryError,
   as CUDA's allocator would under set_per_process_memory_fraction), every other memory
   key at its default, through ``loop.run_steps`` for ``--adaptive-steps``. Reports its
   samples/s over the whole run and over the last ``--steps`` steps (settled) against the
   best static micro-batch that fits (target >= 95%); with ``--inject-oom`` also the time
   from an injected OOM to the next completed optimizer step.
4. Halving: what accelerate's ``find_executable_batch_size`` does (try, OOM, halve, keep
   the first that works), from the same oversized micro-batch under the same enforced
   budget, for as many steps; its whole-run samples/s counts the attempts it lost.

    python bench/memory_adaptation.py [--steps 15] [--fit 16] [--adaptive-steps 80] [--inject-oom]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch

from engine.config.config_file import build_run_config
from engine.config.run_config import MemoryConfig
from engine.memory.controller import Geometry, Policy
from engine.trainer import loop
from engine.trainer.link import NullLink
from engine.trainer.memory.geometry import apply_geometry
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.memory.oom_injection import INJECT_OOM_ENV
from engine.trainer.memory.oom_recovery import discard_window, release_memory
from engine.trainer.ranks.process_group import ensure_single_process_env
from engine.trainer.telemetry.step_telemetry import StepTelemetry
from engine.trainer.training_parts import equip
from engine.trainer.workloads.sample_window import SampleWindow
from engine.trainer.workloads.workload import load_workload

MODEL = {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 128}  # the tiny preset's
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
    parser.add_argument(
        "--inject-oom",
        action="store_true",
        help="one OOM mid-window 20 steps into the adaptive run, to time its recovery",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    raw = {
        "steps": 10**9,
        "model": MODEL,
        "train": {"micro_batch": GLOBAL_BATCH, "global_batch": GLOBAL_BATCH, "precision": "fp32"},
        "checkpoint": {"every_steps": 0},
    }
    config = build_run_config(raw)
    ensure_single_process_env()
    loop.seed_everything(config.seed)
    workload = load_workload(config)
    engine = loop.build_engine(config, workload)
    probe = MemoryProbe(engine.device)
    workload.model.register_forward_hook(lambda *_: None if probe.note() else None)  # None: keep the output
    batch = SampleWindow(workload.batch, config.train.micro_batch)
    policy = Policy(MemoryConfig(max_micro_batch=GLOBAL_BATCH), GLOBAL_BATCH, 1, GLOBAL_BATCH)

    static: dict[int, tuple[float, int]] = {}  # micro-batch -> (samples/s by CPU time, peak bytes)
    for micro_batch in policy.micro_batches():  # ascending: RSS rarely shrinks
        if micro_batch < 4:
            continue  # slow and never the best
        apply_geometry(engine, policy.geometry(micro_batch))
        loop.train_step(engine, batch, int(engine.global_steps))  # warm-up
        peak = 0
        cpu = time.process_time()
        for _ in range(args.steps):
            probe.begin_step()
            loop.train_step(engine, batch, int(engine.global_steps))
            peak = max(peak, probe.step_peak())
        rate = args.steps * GLOBAL_BATCH / (time.process_time() - cpu)
        static[micro_batch] = (rate, peak)
        mib = peak / 2**20
        print(f"static micro-batch {micro_batch:3d}: {rate:7,.1f} samples/s (cpu), peak {mib:7.1f} MiB")

    # Halfway between the peaks of --fit and the next notch up: --fit is the largest that fits.
    budget = (static[args.fit][1] + static[2 * args.fit][1]) // 2
    fitting = {m: v for m, v in static.items() if v[1] < budget}
    best_m, (best_rate, _) = max(fitting.items(), key=lambda kv: kv[1][0])
    print(
        f"budget {budget / 2**20:.1f} MiB: best static micro-batch that fits is {best_m} "
        f"({best_rate:,.1f} samples/s)"
    )

    whole, settled, chosen = adaptive(engine, workload, raw, budget, args)
    print(
        f"adaptive (defaults): settled at micro-batch {chosen}; whole run {whole:,.1f} samples/s = "
        f"{whole / best_rate:.1%}, settled {settled:,.1f} = {settled / best_rate:.1%} of the best static "
        "(target >= 95%)"
    )
    for micro_batch, (rate, _) in sorted(fitting.items()):
        print(f"  against static {micro_batch:3d}: {settled / rate:.1%}")
    halved, kept = halving(engine, batch, probe, policy, budget, args.adaptive_steps)
    print(
        f"retry-and-halve (find_executable_batch_size): kept micro-batch {kept}, whole run "
        f"{halved:,.1f} samples/s; adaptive whole run / halving = {whole / halved:.2f}"
    )
    loop.leave_process_group()


def adaptive(
    engine: Any, workload: Any, raw: dict[str, Any], budget: int, args: argparse.Namespace
) -> tuple[float, float, int]:
    """The controller with the defaults from the oversized micro-batch: (whole-run samples/s,
    settled samples/s over the last --steps, the micro-batch it ends at)."""
    apply_geometry(engine, Geometry(GLOBAL_BATCH, 1))  # the oversized micro-batch, no accumulation
    release_memory()  # the sweep's freed heap back to the OS: RSS is the CPU stand-in
    config = build_run_config({**raw, "memory": {"budget": budget, "cpu_enforce": True}})
    link = NullLink(record=True)
    probe = MemoryProbe(engine.device)
    telemetry = StepTelemetry(engine, probe, workload.tokens_per_sample, 1, attempt=1)
    training = loop.Training(config, engine, workload, link, telemetry, run=None)
    start = int(engine.global_steps)
    settle = start + args.adaptive_steps - args.steps
    if args.inject_oom:  # one unforeseen OOM mid-window, 20 steps in
        os.environ[INJECT_OOM_ENV] = f"{start + 20}:1:backward"
    equip(training)  # after the injection is set: adaptive memory reads it when built
    recoveries = time_recoveries(training)
    began = time.process_time()
    loop.run_steps(training, until=settle)
    cpu = time.process_time()
    loop.run_steps(training, until=settle + args.steps)
    end = time.process_time()
    os.environ.pop(INJECT_OOM_ENV, None)
    for event in [m for m in link.sent or [] if getattr(m, "type", "") == "memory_adapted"]:
        print(f"  {event.message}")
    for seconds in recoveries:
        print(f"  OOM -> next completed step: {seconds * 1000:.0f} ms")
    whole = args.adaptive_steps * GLOBAL_BATCH / (end - began)
    return whole, args.steps * GLOBAL_BATCH / (end - cpu), int(engine.train_micro_batch_size_per_gpu())


def halving(
    engine: Any, batch: SampleWindow, probe: MemoryProbe, policy: Policy, budget: int, steps: int
) -> tuple[float, int]:
    """Try, OOM (RSS over the budget after a forward), halve, keep: (whole-run samples/s by
    CPU time including the lost attempts, the micro-batch kept)."""

    def enforce(*_: object) -> None:
        if probe.note() > budget:
            raise MemoryError(f"cpu-rss over the budget of {budget} bytes")

    micro_batch = GLOBAL_BATCH
    apply_geometry(engine, policy.geometry(micro_batch))
    release_memory()
    hook = engine.module.register_forward_hook(enforce)
    began, done = time.process_time(), 0
    try:
        while done < steps:
            try:
                loop.train_step(engine, batch, int(engine.global_steps))
                done += 1
            except MemoryError:
                discard_window(engine)
                micro_batch //= 2
                apply_geometry(engine, policy.geometry(micro_batch))
                release_memory()
    finally:
        hook.remove()
    return steps * GLOBAL_BATCH / (time.process_time() - began), micro_batch


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
