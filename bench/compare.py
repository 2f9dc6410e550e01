"""One command for the throughput figures, side by side: one table, also written as JSON.

    python bench/compare.py [--rounds 3] [--json PATH] [--quick] [--only PART ...] [--setups wide tiny]

Parts (each measured in fresh processes, so torch's threads and the RSS are each run's own):

- ``overhead``: memtui's training loop against a bare DeepSpeed loop on one engine,
  alternated step blocks (bench/overhead.py), once with 1 thread and once with every core
  (the trainer's own choice). Figure: median over the blocks of bare time / ours.
- ``controller``: under one CPU memory budget (between the peaks of micro-batch 16 and 32,
  enforced as ``memory.cpu_enforce`` does), the adaptive controller with the default
  settings against a static sweep and against accelerate's ``find_executable_batch_size``
  (bench/budget_runs.py). Each round runs the sweep, then the controller and accelerate
  in alternating order; samples/s over whole runs (adaptation and lost attempts included).
  Two setups (``--setups``): ``wide`` (4 layers, d_model 128, sequence 256, fp32: the
  sizes' peaks far apart) and ``tiny`` (the tiny preset's model in fp16, the issue's setup).
- ``checkpoint``: the training stall per checkpoint (background seal) as a share of run
  time at the default cadence (bench/checkpoint_stall.py).
- ``console``: an attached console over a live tiny run: CPU (% of one core) and RSS, and
  the time from ``memtui run --detach`` to the first stored step (bench/console_live.py).

``--quick`` is a smoke test of the whole command (one round, few steps, sizes 16 and 32):
its figures are not for quoting. Figures are printed, never asserted; the targets column
says what the README promises.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
PARTS = ("overhead", "controller", "checkpoint", "console")
RUNS: dict[str, list[dict[str, Any]]] = {}  # every child's figures by part, kept in the JSON


@dataclass
class Row:
    """One line of the table: a figure, what it compares, the target it answers to."""

    figure: str
    a: str  # what was measured
    b: str  # what it is compared against
    value: float
    unit: str
    target: str
    ok: bool | None  # None: no target

    def line(self) -> str:
        verdict = {True: "ok", False: "MISS", None: ""}[self.ok]
        return (
            f"{self.figure:34} {self.a:26} {self.b:26} {self.value:10.3f} {self.unit:8} "
            f"{self.target:10} {verdict}"
        )


@dataclass(frozen=True)
class Plan:
    rounds: int
    overhead_blocks: int  # alternated ours/bare blocks per round
    overhead_steps: int  # optimizer steps per block
    overhead_warmup: int  # untimed steps first
    static_steps: int
    budget_steps: int  # steps of a controller or accelerate run
    sizes: tuple[int, ...]  # static micro-batches swept
    checkpoint_steps: int
    checkpoint_every: int
    console_seconds: float
    setups: tuple[str, ...] = ("wide", "tiny")  # bench/budget_runs.py SETUPS the controller runs on


FULL = Plan(3, 10, 20, 50, 20, 60, (8, 16, 32, 64), 400, 20, 30.0)
QUICK = Plan(1, 2, 5, 5, 3, 8, (16, 32), 40, 20, 8.0)


# ------------------------------------------------------------------ child processes


def child(part: str, **params: Any) -> dict[str, Any]:
    """Run ``compare.py --part PART`` in a fresh process; its one JSON line as a dict."""
    command = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--params", json.dumps(params)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=BENCH.parent)
    if done.returncode != 0:
        raise RuntimeError(f"{part} {params} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    RUNS.setdefault(part, []).append({"params": params, **result})
    return result


def run_part(part: str, params: dict[str, Any]) -> dict[str, Any]:
    """In the child: import the bench module and measure (threads and engine are this process's)."""
    sys.path.insert(0, str(BENCH))
    if part == "overhead":
        import overhead

        return overhead.measure(**params)
    if part in ("static", "adaptive", "accelerate"):
        import budget_runs

        from engine.trainer import loop

        figures: dict[str, Any] = getattr(budget_runs, part)(**params)
        loop.leave_process_group()
        return figures
    if part == "checkpoint":
        import checkpoint_stall

        return checkpoint_stall.one(background=True, **params)
    if part == "console":
        import console_live

        return console_live.measure(**params)
    raise ValueError(f"--part: unknown part {part!r}")


# ------------------------------------------------------------------------ the parts


def overhead_rows(plan: Plan) -> list[Row]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    rows, ours = [], {}
    for threads, target in ((1, 0.97), (0, 0.95)):
        ratios, rates = [], []
        for _ in range(plan.rounds):
            got = child(
                "overhead",
                threads=threads,
                rounds=plan.overhead_blocks,
                steps=plan.overhead_steps,
                warmup=plan.overhead_warmup,
            )
            ratios.append(got["median_round_ratio_wall"])
            rates.append(got["ours_tok_s_wall"])
        ours[threads] = statistics.median(rates)
        label = "1 thread" if threads == 1 else f"every core ({cores})"
        value = statistics.median(ratios)
        rows.append(
            Row("trainer / bare DeepSpeed loop", f"trainer, {label}", f"bare, {label}", value, "x",
                f">= {target}", value >= target)
        )  # fmt: skip
    # The trainer's own choice (every core now) against one thread (what it used on 2 cores
    # before): tokens/s of the separate runs above, so machine drift is not cancelled here.
    rows.append(
        Row("trainer every core / 1 thread", f"trainer, {cores} threads", "trainer, 1 thread",
            ours[0] / ours[1], "x", "", None)
    )  # fmt: skip
    return rows


def controller_rows(plan: Plan) -> list[Row]:
    return [row for setup in plan.setups for row in setup_rows(plan, setup)]


def setup_rows(plan: Plan, setup: str) -> list[Row]:
    """The controller against the sweep and accelerate for one model and precision."""
    static: dict[int, list[dict[str, Any]]] = {m: [] for m in plan.sizes}
    runs: dict[str, list[dict[str, Any]]] = {"adaptive": [], "accelerate": []}
    budget = 0
    for round_ in range(plan.rounds):
        sizes = plan.sizes if round_ % 2 == 0 else tuple(reversed(plan.sizes))
        for m in sizes:
            static[m].append(child("static", micro_batch=m, steps=plan.static_steps, setup=setup))
        if not budget:  # between the peaks of 16 and 32: 16 is the largest that fits
            budget = int((peak(static[16]) + peak(static[32])) / 2)
        order = ("adaptive", "accelerate") if round_ % 2 == 0 else ("accelerate", "adaptive")
        for mode in order:
            runs[mode].append(child(mode, budget=budget, steps=plan.budget_steps, setup=setup))
    fitting = {m: rate(r) for m, r in static.items() if peak(r) <= budget}
    best_m = max(fitting, key=lambda m: fitting[m])
    ours, theirs = rate(runs["adaptive"]), rate(runs["accelerate"])
    settled = "/".join(str(r["micro_batch"]) for r in runs["adaptive"])
    tried = "/".join(str(r["micro_batch"]) for r in runs["accelerate"])
    budget_mb = f"{budget / 2**20:.0f} MiB"
    paired = statistics.median(
        a["samples_s"] / b["samples_s"] for a, b in zip(runs["adaptive"], runs["accelerate"], strict=True)
    )  # each round's own pair: the machine's drift between rounds cancels
    return [
        Row(f"controller / best static ({setup})", f"adaptive, ends at {settled}", f"static {best_m}",
            ours / fitting[best_m], "x", ">= 0.95", ours / fitting[best_m] >= 0.95),
        Row(f"controller / accelerate ({setup})", f"adaptive, {budget_mb}", f"find_exec..., ends at {tried}",
            ours / theirs, "x", ">= 1.0", ours >= theirs),
        Row(f"  same, median of pairs ({setup})", "adaptive, round r", "accelerate, round r", paired, "x",
            "", None),
        Row(f"controller samples/s ({setup})", "adaptive (defaults)", f"budget {budget_mb}", ours, "sample/s",
            "", None),
        Row(f"accelerate samples/s ({setup})", "find_executable_batch", "whole run", theirs, "sample/s", "",
            None),
        Row(f"best static samples/s ({setup})", f"static {best_m}", f"of {sorted(fitting)}", fitting[best_m],
            "sample/s", "", None),
    ]  # fmt: skip


def peak(runs: list[dict[str, Any]]) -> int:
    return max(int(r["peak_bytes"]) for r in runs)


def rate(runs: list[dict[str, Any]]) -> float:
    return statistics.median(float(r["samples_s"]) for r in runs)


def checkpoint_rows(plan: Plan) -> list[Row]:
    default_every = 500  # CheckpointConfig.every_steps's default
    shares = []
    for _ in range(plan.rounds):
        got = child("checkpoint", preset="tiny", steps=plan.checkpoint_steps, every=plan.checkpoint_every)
        if got["stall_s"]:
            shares.append(statistics.median(got["stall_s"]) / (default_every * got["step_s"]))
    value = 100 * statistics.median(shares) if shares else float("nan")
    return [Row("checkpoint stall share", "background seal", f"every {default_every} steps", value, "%",
                "", None)]  # fmt: skip


def console_rows(plan: Plan) -> list[Row]:
    seen = [child("console", seconds=plan.console_seconds) for _ in range(plan.rounds)]
    cpu = statistics.median(s["cpu_percent"] for s in seen)
    rss = max(s["rss_max_mb"] for s in seen)
    first = statistics.median(s["start_to_first_step_s"] for s in seen)
    return [
        Row("console CPU", "memtui attach, tiny", "% of one core", cpu, "%", "< 3", cpu < 3),
        Row("console RSS", "memtui attach, tiny", "max", rss, "MB", "< 100", rss < 100),
        Row("start to first step", "memtui run --detach", "first stored step", first, "s", "", None),
    ]


# ------------------------------------------------------------------------- the table


def machine() -> dict[str, Any]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": cores,
        "python": platform.python_version(),
        "load_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="rounds of each part (default 3; --quick 1)")
    parser.add_argument("--json", type=Path, help="also write the table here as JSON")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke test: few steps, figures not for quoting"
    )
    parser.add_argument("--only", nargs="+", choices=PARTS, help="these parts only (default: all)")
    parser.add_argument(
        "--setups", nargs="+", choices=("wide", "tiny"), help="controller: these models only (default both)"
    )
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        print(json.dumps(run_part(args.part, json.loads(args.params))))
        return
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = dataclasses.replace(plan, rounds=args.rounds)
    if args.setups:
        plan = dataclasses.replace(plan, setups=tuple(args.setups))
    measure = {"overhead": overhead_rows, "controller": controller_rows,
               "checkpoint": checkpoint_rows, "console": console_rows}  # fmt: skip
    started, rows = time.time(), []
    for part in args.only or PARTS:
        print(f"... {part}", file=sys.stderr, flush=True)
        rows += measure[part](plan)
    header = f"{'figure':34} {'A':26} {'B':26} {'value':>10} {'unit':8} {'target':10}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(row.line())
    document = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "seconds": round(time.time() - started),
        "machine": machine(),
        "quick": args.quick,
        "plan": asdict(plan),
        "rows": [asdict(row) for row in rows],
        "runs": RUNS,
    }
    if args.json:
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
