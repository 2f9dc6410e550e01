"""Seconds from a SIGKILL of the trainer to its next completed step after the automatic
restart, with the warm standby trainer and without it (a cold start), and the checkpoint
stall per save.

    python bench/recovery_time.py [--kills 10] [--mode both|standby|cold] [--json PATH]

Each mode starts its own tiny run (checkpoint every 20 steps, restart backoff 0.1 s,
``restart.standby`` on or off) with ``memtui run``, kills the trainer KILLS times (each
time a few steps into the attempt, not as it saves, once a checkpoint verifies and, with the
standby, once a spare is ready), and reads the store: the recovery is the first step of the
next attempt (the trainer's own timestamp) minus the moment of the kill. The spare's idle
cost is what its ``standby_ready`` events say. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.checkpoints.store import newest_verified_step
from engine.run.directory import RunDir
from engine.run.store import Store

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"
EVERY = 20  # steps between checkpoints
POLL_S = 0.02  # s between looks at the store
SETTLE_STEPS = 3  # steps an attempt makes before it is killed (and, with the standby, a spare ready)


def config_text(standby: bool) -> str:
    return (
        f'name = "bench"\nsteps = 100000\n[checkpoint]\nevery_steps = {EVERY}\n'
        "[restart]\nbackoff_initial_s = 0.1\nmax_restarts = 100\n"
        f"standby = {'true' if standby else 'false'}\n"
    )


def events(run: RunDir, type_: str) -> list[dict[str, Any]]:
    with Store(run.store, readonly=True) as store:
        return [e.data for e in store.events_since(0) if e.type == type_]


def spare_ready(run: RunDir) -> bool:
    """A spare has said ready that has not become a trainer yet."""
    trainers = {e["pid"] for e in events(run, "trainer_launched")}
    return any(e["pid"] not in trainers for e in events(run, "standby_ready"))


def measure(standby: bool, kills: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    config = home / "b.toml"
    config.write_text(config_text(standby))
    out = subprocess.run(
        [MEMTUI, "run", str(config), "--detach", "--json"], env=env, capture_output=True, text=True
    )
    run = RunDir(Path(json.loads(out.stdout)["run_dir"]))
    recoveries: list[float] = []
    load_before = os.getloadavg()  # 1, 5, 15 min: the modes run one after the other
    try:
        for attempt in range(1, kills + 1):
            first = None  # the attempt's first step: the kill comes a few steps later
            while True:
                with Store(run.store, readonly=True) as store:
                    latest, meta = store.latest_step(), store.read_meta()
                if latest is not None and latest.attempt == attempt:
                    first = latest.step if first is None else first
                    settled = latest.step >= first + SETTLE_STEPS and latest.step % EVERY > 1  # not mid-save
                    saved = newest_verified_step(run.checkpoints) is not None  # a restart loads one
                    if settled and saved and (not standby or spare_ready(run)):
                        break
                time.sleep(POLL_S)
            killed_at = time.time()
            assert meta.trainer_pid is not None
            os.killpg(meta.trainer_pid, signal.SIGKILL)
            while True:
                with Store(run.store, readonly=True) as store:
                    latest = store.latest_step()
                if latest is not None and latest.attempt == attempt + 1:
                    recoveries.append(latest.ts - killed_at)
                    break
                time.sleep(POLL_S)
            print(f"  {'standby' if standby else 'cold'} kill {attempt}: {recoveries[-1]:.2f} s", flush=True)
        launches = events(run, "trainer_launched")
        spares = events(run, "standby_ready")
        stalls = [e["seconds"] for e in events(run, "checkpoint_saved")]
    finally:
        subprocess.run([MEMTUI, "stop", run.run_id], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    return {
        "recoveries_s": [round(r, 3) for r in recoveries],
        "median_s": round(statistics.median(recoveries), 3),
        "warm_restarts": sum(1 for e in launches if e.get("standby")),
        "spare": _spare_cost(spares),
        "median_checkpoint_stall_s": round(statistics.median(stalls), 4) if stalls else None,
        "loadavg": {"before": load_before, "after": os.getloadavg()},
    }


def _spare_cost(ready: list[dict[str, Any]]) -> dict[str, float] | None:
    """Medians over every spare of the run: resident MiB, idle % of a core, warm-up s."""
    if not ready:
        return None
    return {
        key: round(statistics.median(e[key] for e in ready), 2)
        for key in ("rss_mib", "idle_cpu_percent", "warmup_s")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs per mode (default 10)")
    parser.add_argument("--mode", choices=("both", "standby", "cold"), default="both")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    modes = {"standby": [True], "cold": [False], "both": [True, False]}[args.mode]
    result: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "cores": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "kills": args.kills,
        "preset": "tiny",
        "restart_backoff_s": 0.1,
    }
    for standby in modes:
        result["standby" if standby else "cold"] = measure(standby, args.kills)
    result["loadavg_after"] = os.getloadavg()
    for name in ("standby", "cold"):
        if name in result:
            figures = result[name]
            median, each = figures["median_s"], figures["recoveries_s"]
            print(f"{name}: SIGKILL -> next step, median {median:.2f} s of {each}")
            if figures["spare"]:
                print(f"  spare while idle: {figures['spare']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
