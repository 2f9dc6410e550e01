"""Seconds from a SIGKILL of the trainer to the next completed step after the automatic
restart, and the checkpoint stall per save. ``python bench/recovery_time.py [KILLS]``.

Starts a tiny run (checkpoint every 20 steps, restart backoff 0.1 s) with ``memtui run``,
kills the trainer KILLS times (default 3), reads the store. Not part of the test suite.
"""

from __future__ import annotations

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

from engine.run.directory import RunDir
from engine.run.store import Store

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"


def main(kills: int = 3) -> None:
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    config = home / "b.toml"
    config.write_text(
        'name = "bench"\nsteps = 100000\n[checkpoint]\nevery_steps = 20\n'
        "[restart]\nbackoff_initial_s = 0.1\nmax_restarts = 100\n"
    )
    out = subprocess.run(
        [MEMTUI, "run", str(config), "--detach", "--json"], env=env, capture_output=True, text=True
    )
    run = RunDir(Path(json.loads(out.stdout)["run_dir"]))
    recoveries, stalls, step_times = [], [], []
    try:
        for attempt in range(1, kills + 1):
            while True:
                with Store(run.store, readonly=True) as store:
                    latest, meta = store.latest_step(), store.read_meta()
                if latest is not None and latest.attempt == attempt and latest.step % 20 > 5:
                    break
                time.sleep(0.05)
            killed_at = time.time()
            assert meta.trainer_pid is not None
            os.killpg(meta.trainer_pid, signal.SIGKILL)
            while True:
                with Store(run.store, readonly=True) as store:
                    latest = store.latest_step()
                if latest is not None and latest.attempt == attempt + 1:
                    recoveries.append(latest.ts - killed_at)
                    break
                time.sleep(0.02)
        time.sleep(3)
        with Store(run.store, readonly=True) as store:
            stalls = [e.data["seconds"] for e in store.events_since(0) if e.type == "checkpoint_saved"]
            step_times = [s.step_time_s for s in store.steps()]
    finally:
        subprocess.run([MEMTUI, "stop", run.run_id], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    step = statistics.median(step_times)
    stall = statistics.median(stalls)
    print(f"SIGKILL -> next step after the restart: {', '.join(f'{r:.2f}' for r in recoveries)} s")
    print(
        f"checkpoint stall: median {stall * 1000:.1f} ms over {len(stalls)} saves; "
        f"median step {step * 1000:.1f} ms"
    )
    print(f"at every_steps=500 (default): {stall / (500 * step):.3%} of run time")
    print("(checkpoint.background is on by default; bench/checkpoint_stall.py compares both)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
