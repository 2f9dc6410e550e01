"""Training under a CPU memory budget, three ways, each in its own process: a static
micro-batch, memtui's adaptive memory with the defaults a user gets, and accelerate's
``find_executable_batch_size`` (try, OOM, halve).

Every run of a setup is the same model, precision and global batch (``SETUPS[--setup]``,
one rank) built from the run config by the
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
  (accelerate's own when it is installed, else the same loop here, recorded as
  ``FALLBACK_LOOP``, never as accelerate); samples/s over the whole run, lost attempts
  included, and ``loop`` / ``accelerate_version``: what ran.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass(frozen=True)
class Setup:
    """One model and precision under a budget: the static sizes swept, and the size the
    budget is set for (bench/compare.py: the largest that fits, with a margin)."""

    model: dict[str, int]
    precision: str
    global_batch: int  # samples per optimizer step; the oversized start of adaptive and accelerate
    sizes: tuple[int, ...]  # static micro-batches swept (the halving ladder from global_batch)
    fits: int  # the budget is BUDGET_MARGIN above this size's measured peak

    @property
    def over(self) -> int:
        """The size above ``fits``: its peak must lie over the budget, or nothing is tested."""
        return 2 * self.fits


SETUPS: dict[str, Setup] = {
    # 4 layers, d_model 128, sequence 256, fp32: the peaks of 8, 16, 32 and 64 lie ~140-270 MB
    # apart, far beyond the RSS's run-to-run noise (a few MB).
    "wide": Setup(
        {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 256}, "fp32", 64, (8, 16, 32, 64), 16
    ),
    # The tiny preset's model and precision (fp16). At global batch 64 its sizes' peaks lie only
    # 5-11 % apart (16: 408-413 MiB, 32: 452 MiB on 2026-11-30), so no budget could leave 16 a
    # 10 % margin without letting 32 in; 3 of 6 halving runs fell to 8 on a few MB of noise.
    # At global batch 256, 64 peaks at ~532 MiB and 128 at ~686 MiB (measured 2026-12-02): a
    # budget 12 % over 64's peak leaves 128 ~15 % over it.
    "tiny": Setup(
        {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 128}, "fp16", 256, (32, 64, 128, 256), 64
    ),
}
# The budget over the peak of the size meant to fit (a fraction): RSS after an out-of-memory
# error stays a few MB to ~15 MB above a fresh run's peak (the halving loop's retries run on
# that heap), so a margin under ~10 % turns noise into a smaller size.
BUDGET_MARGIN = 0.12
SETTLE_STEPS = 5  # steps left out of the steady per-step time
FALLBACK_LOOP = "halving loop (accelerate not installed)"  # never called accelerate
INSTALL_HINT = "pip install -e '.[bench]'"  # brings accelerate (pyproject's bench extra)
OOM_TEXT = "DefaultCPUAllocator: can't allocate memory"  # what accelerate recognises on the CPU


def config_for(micro_batch: int, memory: dict[str, Any], setup: str) -> Any:
    from engine.config.config_file import build_run_config

    chosen = SETUPS[setup]
    return build_run_config(
        {
            "steps": 10**9,  # a flat lr for the whole run
            "model": chosen.model,
            "train": {
                "micro_batch": micro_batch,
                "global_batch": chosen.global_batch,
                "precision": chosen.precision,
            },
            "checkpoint": {"every_steps": 0},
            "memory": memory,
        }
    )


def prepared(micro_batch: int, memory: dict[str, Any], setup: str) -> Any:
    """A ``loop.Training`` on a fresh engine (threads as the trainer sets them)."""
    from engine.trainer import loop
    from engine.trainer.link import NullLink
    from engine.trainer.memory.memory_probe import MemoryProbe
    from engine.trainer.ranks.process_group import ensure_single_process_env
    from engine.trainer.telemetry.step_telemetry import StepTelemetry
    from engine.trainer.training_parts import equip
    from engine.trainer.workloads.workload import load_workload

    config = config_for(micro_batch, memory, setup)
    loop.share_cpu_cores()
    ensure_single_process_env()
    loop.seed_everything(config.seed)
    workload = load_workload(config)
    engine = loop.build_engine(config, workload)
    telemetry = StepTelemetry(engine, MemoryProbe(engine.device), workload.tokens_per_sample, 1, attempt=1)
    return equip(loop.Training(config, engine, workload, NullLink(record=True), telemetry, run=None))


def static(micro_batch: int, steps: int, setup: str = "wide") -> dict[str, Any]:
    from engine.trainer import loop
    from engine.trainer.workloads.sample_window import SampleWindow

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
    samples_s = steps * SETUPS[setup].global_batch / seconds
    return {"micro_batch": micro_batch, "samples_s": samples_s, "peak_bytes": peak}


def adaptive(budget: int, steps: int, setup: str = "wide") -> dict[str, Any]:
    from engine.trainer import loop

    global_batch = SETUPS[setup].global_batch
    training = prepared(global_batch, {"budget": budget, "cpu_enforce": True}, setup)
    engine = training.engine
    wall = time.perf_counter()
    loop.run_steps(training, until=steps)
    seconds = time.perf_counter() - wall
    sent = training.link.sent or []
    adaptations = [m.message for m in sent if getattr(m, "type", "") == "memory_adapted"]
    step_times = [m.sample.step_time_s for m in sent if getattr(m, "sample", None) is not None]
    return {
        "samples_s": int(engine.global_steps) * global_batch / seconds,
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
    from engine.trainer.memory.geometry import realign_micro_steps
    from engine.trainer.memory.oom_recovery import trim_heap
    from engine.trainer.workloads.sample_window import SampleWindow

    global_batch = SETUPS[setup].global_batch
    training = prepared(global_batch, {"adaptive": False}, setup)
    engine, probe = training.engine, training.telemetry.probe

    def over_budget(*_: object) -> None:
        if probe.note() > budget:
            raise RuntimeError(f"{OOM_TEXT}: RSS over the budget of {budget} bytes")

    training.workload.model.register_forward_hook(over_budget)
    batch = SampleWindow(training.workload.batch, global_batch)
    tried: list[int] = []
    step_times: list[float] = []  # completed steps only

    def train(micro_batch: int) -> None:
        tried.append(micro_batch)
        engine.set_train_micro_batch_size(micro_batch)
        engine.set_train_batch_size(global_batch)  # keeps micro_batch, recomputes the accumulation
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
    executable_batch_size(global_batch)(train)()
    seconds = time.perf_counter() - wall
    return {
        "samples_s": steps * global_batch / seconds,
        "micro_batch": tried[-1],
        "tried": tried,
        **halving_record(),
        "steady_step_s": steady(step_times),
    }


def accelerate_version() -> str | None:
    """The installed accelerate's version; None when it cannot be imported."""
    try:
        import accelerate
    except ImportError:
        return None
    return str(getattr(accelerate, "__version__", "unknown"))


def halving_record() -> dict[str, Any]:
    """What ran the try-OOM-halve side, for the run's JSON: ``loop`` names it (accelerate and
    its version, or ``FALLBACK_LOOP``: never "accelerate" when accelerate did not run)."""
    version = accelerate_version()
    return {"loop": loop_name(version), "accelerate_version": version}


def loop_name(version: str | None) -> str:
    """The halving side's name in tables and JSON, from the accelerate version that ran it."""
    return f"accelerate {version}" if version else FALLBACK_LOOP


def executable_batch_size(start: int) -> Callable[[Callable[[int], None]], Callable[[], None]]:
    """accelerate's ``find_executable_batch_size(starting_batch_size=start)``, or the same
    loop (call with the size; on an out-of-memory error halve and call again) without it."""
    if accelerate_version():
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
