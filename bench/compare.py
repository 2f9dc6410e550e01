"""One command for the throughput figures, side by side: one table, also written as JSON.

    python bench/compare.py [--rounds 3] [--json PATH] [--quick] [--only PART ...] [--setups wide tiny]

Parts (each measured in fresh processes, so torch's threads and the RSS are each run's own):

- ``overhead``: memtui's training loop against a bare DeepSpeed loop on one engine,
  alternated step blocks (bench/overhead.py), once with 1 thread and once with every core
  (the trainer's own choice). Figure: median over the blocks of bare time / ours.
- ``controller``: under one CPU memory budget (``BUDGET_MARGIN`` over the measured peak of
  the size meant to fit, under the next size's; enforced as ``memory.cpu_enforce`` does),
  the adaptive controller with the default settings against a static sweep and against
  accelerate's ``find_executable_batch_size`` (bench/budget_runs.py). Each round runs the
  sweep, then the controller and accelerate in alternating order; samples/s over whole runs
  (adaptation and lost attempts included). Two setups (``--setups``): ``wide`` (4 layers,
  d_model 128, sequence 256, fp32, global batch 64: 16 fits) and ``tiny`` (the tiny preset's
  model in fp16, global batch 256: 64 fits). Without accelerate (``pip install -e
  '.[bench]'``) the same halving loop runs, named "halving loop (accelerate not
  installed)" in the table and the JSON, never accelerate.
- ``checkpoint``: the training stall per checkpoint (background seal) as a share of run
  time at the default cadence (bench/checkpoint_stall.py).
- ``console``: an attached console over a live tiny run: CPU (% of one core) and RSS, and
  the time from ``memtui run --detach`` to the first stored step (bench/console_live.py).

``--quick`` is a smoke test of the whole command (one round, few steps, two sizes a setup):
its figures are not for quoting. Figures are printed, never asserted; the targets column
says what docs/development.md promises.
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
sys.path.insert(0, str(BENCH))
import budget_runs  # noqa: E402  (torch-free at import: torch comes in the child processes)

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
    whole_sweep: bool  # every size of the setup; else only the one that fits and the next
    checkpoint_steps: int
    checkpoint_every: int
    console_seconds: float
    setups: tuple[str, ...] = ("wide", "tiny")  # bench/budget_runs.py SETUPS the controller runs on


FULL = Plan(3, 10, 20, 50, 20, 60, True, 400, 20, 30.0)
QUICK = Plan(1, 2, 5, 5, 3, 8, False, 40, 20, 8.0)


# ------------------------------------------------------------------ child processes


def child(part: str, **params: Any) -> dict[str, Any]:
    """Run ``compare.py --part PART`` in a fresh process; its one JSON line as a dict."""
    command = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--params", json.dumps(params)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # others' work on the machine
    done = subprocess.run(command, capture_output=True, text=True, cwd=BENCH.parent)
    if done.returncode != 0:
        raise RuntimeError(f"{part} {params} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    RUNS.setdefault(part, []).append({"params": params, "load_1m": load, **result})
    print(f"    {part} {params}: {result.get('samples_s', '')}", file=sys.stderr, flush=True)
    return result


def run_part(part: str, params: dict[str, Any]) -> dict[str, Any]:
    """In the child: import the bench module and measure (threads and engine are this process's)."""
    if part == "overhead":
        import overhead

        return overhead.measure(**params)
    if part in ("static", "adaptive", "accelerate"):
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
    if budget_runs.accelerate_version() is None:
        print(f"accelerate is not installed ({budget_runs.INSTALL_HINT}): the halving side is "
              f"the same loop here, named {budget_runs.FALLBACK_LOOP!r}", file=sys.stderr)  # fmt: skip
    return [row for setup in plan.setups for row in setup_rows(plan, setup)]


def setup_rows(plan: Plan, setup: str) -> list[Row]:
    """The controller against the sweep and the halving loop for one model and precision."""
    chosen = budget_runs.SETUPS[setup]
    swept = chosen.sizes if plan.whole_sweep else (chosen.fits, chosen.over)
    static: dict[int, list[dict[str, Any]]] = {m: [] for m in swept}
    runs: dict[str, list[dict[str, Any]]] = {"adaptive": [], "accelerate": []}
    budget = 0
    for round_ in range(plan.rounds):
        for m in swept if round_ % 2 == 0 else tuple(reversed(swept)):
            static[m].append(child("static", micro_batch=m, steps=plan.static_steps, setup=setup))
        if not budget:
            budget = budget_for(setup, static)
        order = ("adaptive", "accelerate") if round_ % 2 == 0 else ("accelerate", "adaptive")
        for mode in order:
            runs[mode].append(child(mode, budget=budget, steps=plan.budget_steps, setup=setup))
    fitting = {m: rate(r) for m, r in static.items() if peak(r) <= budget}
    best_m = max(fitting, key=lambda m: fitting[m])
    ours, theirs = rate(runs["adaptive"]), rate(runs["accelerate"])
    name = halving_name(runs["accelerate"])
    settled = "/".join(str(r["micro_batch"]) for r in runs["adaptive"])
    tried = "/".join(str(r["micro_batch"]) for r in runs["accelerate"])
    budget_mb = f"{budget / 2**20:.0f} MiB"
    pairs = [
        a["samples_s"] / b["samples_s"] for a, b in zip(runs["adaptive"], runs["accelerate"], strict=True)
    ]
    paired = statistics.median(pairs)  # each round's own pair: the machine's drift between rounds cancels
    return [
        Row(f"controller / best static ({setup})", f"adaptive, ends at {settled}", f"static {best_m}",
            ours / fitting[best_m], "x", ">= 0.95", ours / fitting[best_m] >= 0.95),
        Row(f"controller / {name} ({setup})", f"adaptive, {budget_mb}", f"halving, ends at {tried}",
            ours / theirs, "x", ">= 1.0", ours >= theirs),
        Row(f"  same, median of pairs ({setup})", "adaptive, round r", f"{name}, round r", paired, "x",
            "", None),
        Row(f"  lowest pair ({setup})", "adaptive, round r", f"{name}, round r", min(pairs), "x", "", None),
        Row(f"  highest pair ({setup})", "adaptive, round r", f"{name}, round r", max(pairs), "x", "", None),
        Row(f"controller samples/s ({setup})", "adaptive (defaults)", f"budget {budget_mb}", ours, "sample/s",
            "", None),
        Row(f"{name} samples/s ({setup})", "try, OOM, halve", "whole run", theirs, "sample/s", "",
            None),
        Row(f"best static samples/s ({setup})", f"static {best_m}", f"of {sorted(fitting)}", fitting[best_m],
            "sample/s", "", None),
    ]  # fmt: skip


def budget_for(setup: str, static: dict[int, list[dict[str, Any]]]) -> int:
    """``BUDGET_MARGIN`` over the measured peak of the size meant to fit; refuses when the
    next size would fit as well (then no run has to adapt and the figures say nothing)."""
    chosen = budget_runs.SETUPS[setup]
    budget = int(peak(static[chosen.fits]) * (1 + budget_runs.BUDGET_MARGIN))
    if peak(static[chosen.over]) <= budget:
        raise RuntimeError(
            f"{setup}: micro-batch {chosen.over} peaks at {peak(static[chosen.over]) / 2**20:.0f} MiB, "
            f"under the budget of {budget / 2**20:.0f} MiB set {budget_runs.BUDGET_MARGIN:.0%} over "
            f"{chosen.fits}'s peak: SETUPS[{setup!r}] needs sizes further apart"
        )
    return budget


def halving_name(runs: list[dict[str, Any]]) -> str:
    """The name the halving runs recorded for what ran them (``budget_runs.halving_record``):
    accelerate and its version only when accelerate ran every one of them."""
    names = {r.get("loop") for r in runs}
    if len(names) != 1 or None in names:
        raise ValueError(
            f"the halving runs' 'loop' fields disagree or are missing: {sorted(map(str, names))}"
        )
    return str(names.pop())


def peak(runs: list[dict[str, Any]]) -> int:
    return max(int(r["peak_bytes"]) for r in runs)


def rate(runs: list[dict[str, Any]]) -> float:
    return statistics.median(float(r["samples_s"]) for r in runs)


def checkpoint_rows(plan: Plan) -> list[Row]:
    default_every = 500  # the fixed interval before every_steps = "auto" became the default
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
        "accelerate_version": budget_runs.accelerate_version(),  # None: the halving loop was ours
        "budget_margin": budget_runs.BUDGET_MARGIN,
        "plan": asdict(plan),
        "rows": [asdict(row) for row in rows],
        "runs": RUNS,
    }
    if args.json:
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
