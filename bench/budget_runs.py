"""Training under a CPU memory budget, three ways, each in its own process: a static
micro-batch, memtui's adaptive memory with the defaults a user gets, and accelerate's
``find_executable_batch_size`` (try, OOM, halve).

Every run is the same model, precision and global batch (``SETUPS[--setup]``,
``GLOBAL_BATCH`` samples per optimizer step, one rank) built from the run config by the
trainer's own functions (``loop.build_engine``, ``loop.run_steps``, ``loop.train_step``);
none reaches into the controller. A budget is made real on the CPU the way
``memory.cpu_enforce`` does: a forward that leaves the process's RSS over it fails as an
out-of-memory error would.

- ``static``: ``--micro-batch M`` from the start, no budget; samples/s by wall clock over
  ``--steps`` steps after one warm-up step, and the largest per-step RSS (bytes).
- ``adaptive``: the configured micro-batch is the whole global batch (oversized), the budget
  enforced, every other memory setting its default; samples/s over the whole run of
  ``--steps`` steps (shrinks and redone windows included) and the micro-batch it ends at.
- ``accelerate``: the same oversized start under the same budget, adaptive memory off;
  ``find_executable_batch_size`` from the global batch down, halving on each OOM
  (accelerate's own when it is installed, else the same loop here); samples/s over the
  whole run, lost attempts included.

Prints one JSON object. bench/compare.py runs these side by side.

    python bench/budget_runs.py static --micro-batch 16 [--steps 30] [--setup wide|tiny]
    python bench/budget_runs.py adaptive --budget BYTES [--steps 60] [--setup wide|tiny]
    python bench/budget_runs.py accelerate --budget BYTES [--steps 60] [--setup wide|tiny]
"""

from __future__ import annotations

import argparse
import functools
import gc
import inspect
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETUPS: dict[str, tuple[dict[str, int], str]] = {
    # 4 layers, d_model 128, sequence 256, fp32: the peaks of 8, 16, 32 and 64 lie ~140-270 MB
    # apart, far beyond the RSS's run-to-run noise (a few MB).
    "wide": ({"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 256}, "fp32"),
    # The setup: the tiny preset's model and precision (fp16); its peaks lie only
    # ~10-40 MB apart, so a few MB of noise can move a size across the budget.
    "tiny": ({"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 128}, "fp16"),
}
GLOBAL_BATCH = 64  # samples per optimizer step
SETTLE_STEPS = 5  # steps left out of the steady per-step time
OOM_TEXT = "DefaultCPUAllocator: can't allocate memory"  # what accelerate recognises on the CPU


def config_for(micro_batch: int, memory: dict[str, Any], setup: str) -> Any:
    from engine.config_file import build_run_config

    model, precision = SETUPS[setup]
    return build_run_config(
        {
            "steps": 10**9,  # a flat lr for the whole run
            "model": model,
            "train": {"micro_batch": micro_batch, "global_batch": GLOBAL_BATCH, "precision": precision},
            "checkpoint": {"every_steps": 0},
            "memory": memory,
        }
    )


def prepared(micro_batch: int, memory: dict[str, Any], setup: str) -> Any:
    """A ``loop.Training`` on a fresh engine (threads as the trainer sets them)."""
    from engine.trainer import loop
    from engine.trainer.link import NullLink
    from engine.trainer.memory_probe import MemoryProbe
    from engine.trainer.process_group import ensure_single_process_env
    from engine.trainer.step_telemetry import StepTelemetry
    from engine.trainer.workload import load_workload

    config = config_for(micro_batch, memory, setup)
    loop.share_cpu_cores()
    ensure_single_process_env()
    loop.seed_everything(config.seed)
    workload = load_workload(config)
    engine = loop.build_engine(config, workload)
    telemetry = StepTelemetry(engine, MemoryProbe(engine.device), workload.tokens_per_sample, 1, attempt=1)
    return loop.Training(config, engine, workload, NullLink(record=True), telemetry, run=None)


def static(micro_batch: int, steps: int, setup: str = "wide") -> dict[str, Any]:
    from engine.trainer import loop
    from engine.trainer.sample_window import SampleWindow

    training = prepared(micro_batch, {"adaptive": False}, setup)
    engine, probe = training.engine, training.telemetry.probe
    training.workload.model.register_forward_hook(lambda *_: None if probe.note() else None)
    batch = SampleWindow(training.workload.batch, micro_batch)
    loop.train_step(engine, batch, int(engine.global_steps))  # warm-up
    peak, wall = 0, time.perf_counter()
    for _ in range(steps):
        probe.begin_step()
        loop.train_step(engine, batch, int(engine.global_steps))
        peak = max(peak, probe.step_peak())
    seconds = time.perf_counter() - wall
    return {"micro_batch": micro_batch, "samples_s": steps * GLOBAL_BATCH / seconds, "peak_bytes": peak}


def adaptive(budget: int, steps: int, setup: str = "wide") -> dict[str, Any]:
    from engine.trainer import loop

    training = prepared(GLOBAL_BATCH, {"budget": budget, "cpu_enforce": True}, setup)
    engine = training.engine
    wall = time.perf_counter()
    loop.run_steps(training, until=steps)
    seconds = time.perf_counter() - wall
    sent = training.link.sent or []
    adaptations = [m.message for m in sent if getattr(m, "type", "") == "memory_adapted"]
    step_times = [m.sample.step_time_s for m in sent if getattr(m, "sample", None) is not None]
    return {
        "samples_s": int(engine.global_steps) * GLOBAL_BATCH / seconds,
        "micro_batch": int(engine.train_micro_batch_size_per_gpu()),
        "steps": int(engine.global_steps),
        "adaptations": adaptations,
        "steady_step_s": steady(step_times),
    }


def steady(step_times: list[float]) -> float | None:
    """Median seconds of the steps after the first ``SETTLE_STEPS`` (adaptation over by then)."""
    settled = step_times[SETTLE_STEPS:]
    return statistics.median(settled) if settled else None


def accelerate(budget: int, steps: int, setup: str = "wide") -> dict[str, Any]:
    from engine.trainer import loop
    from engine.trainer.geometry import realign_micro_steps
    from engine.trainer.oom_recovery import trim_heap
    from engine.trainer.sample_window import SampleWindow

    training = prepared(GLOBAL_BATCH, {"adaptive": False}, setup)
    engine, probe = training.engine, training.telemetry.probe

    def over_budget(*_: object) -> None:
        if probe.note() > budget:
            raise RuntimeError(f"{OOM_TEXT}: RSS over the budget of {budget} bytes")

    training.workload.model.register_forward_hook(over_budget)
    batch = SampleWindow(training.workload.batch, GLOBAL_BATCH)
    tried: list[int] = []
    step_times: list[float] = []  # completed steps only

    def train(micro_batch: int) -> None:
        tried.append(micro_batch)
        engine.set_train_micro_batch_size(micro_batch)
        engine.set_train_batch_size(GLOBAL_BATCH)  # keeps micro_batch, recomputes the accumulation
        realign_micro_steps(engine)
        try:
            while engine.global_steps < steps:
                started = time.perf_counter()
                loop.train_step(engine, batch, int(engine.global_steps))
                step_times.append(time.perf_counter() - started)
        except RuntimeError:
            engine.zero_grad()  # the half-done window is thrown away, as a user's retry would
            realign_micro_steps(engine)
            gc.collect()  # accelerate's release_memory: a full collection, then the device's
            trim_heap()  # cache (the CPU's: glibc's free heap, as memtui's release does)
            raise

    wall = time.perf_counter()
    executable_batch_size(GLOBAL_BATCH)(train)()
    seconds = time.perf_counter() - wall
    return {
        "samples_s": steps * GLOBAL_BATCH / seconds,
        "micro_batch": tried[-1],
        "tried": tried,
        "accelerate": accelerate_installed(),
        "steady_step_s": steady(step_times),
    }


def accelerate_installed() -> bool:
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return False
    return True


def executable_batch_size(start: int) -> Callable[[Callable[[int], None]], Callable[[], None]]:
    """accelerate's ``find_executable_batch_size(starting_batch_size=start)``, or the same
    loop (call with the size; on an out-of-memory error halve and call again) without it."""
    if accelerate_installed():
        from accelerate.utils import find_executable_batch_size

        if "reduce_batch_size_fn" not in inspect.signature(find_executable_batch_size).parameters:
            return functools.partial(find_executable_batch_size, starting_batch_size=start)  # halves
        size = [start]  # since 1.x it shrinks by 0.9 unless told: halve, as the classic loop does

        def halve() -> int:
            size[0] //= 2
            return size[0]

        return functools.partial(
            find_executable_batch_size, starting_batch_size=start, reduce_batch_size_fn=halve
        )

    def decorate(fn: Callable[[int], None]) -> Callable[[], None]:
        def run() -> None:
            size = start
            while True:
                try:
                    return fn(size)
                except RuntimeError as err:
                    if OOM_TEXT not in str(err) or size == 1:
                        raise
                    size //= 2

        return run

    return decorate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["static", "adaptive", "accelerate"])
    parser.add_argument("--micro-batch", type=int, default=16, help="static: the micro-batch")
    parser.add_argument("--budget", type=int, help="adaptive, accelerate: the RSS budget in bytes")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
    parser.add_argument(
        "--setup", choices=sorted(SETUPS), default="wide", help="model and precision (default wide)"
    )
    args = parser.parse_args()
    if args.mode != "static" and not args.budget:
        parser.error(f"{args.mode} needs --budget BYTES")
    if args.mode == "static":
        figures = static(args.micro_batch, args.steps, args.setup)
    else:
        figures = (adaptive if args.mode == "adaptive" else accelerate)(args.budget, args.steps, args.setup)
    from engine.trainer import loop

    loop.leave_process_group()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
