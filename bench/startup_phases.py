"""From ``memtui run --detach`` to the first step, cold and warm, and each start-up phase's share.

    python bench/startup_phases.py [--cold] [--extensions DIR] [--steps N] [--json]

Starts ``memtui run --preset tiny --steps N --detach`` in a scratch ``MEMTUI_HOME`` with
``TORCH_EXTENSIONS_DIR=DIR`` (``--cold`` empties it first, so DeepSpeed's op is built; a
run after it without ``--cold`` is warm),
waits for the run's first stored step, stops the run, and reads its ``startup_phase``
events: each phase lasts from its event to the next one (the last, ``first_step``, to the
first step's time). The command's own start (before the supervisor's first event) is
``launch``. Run it under ``nice`` on a shared machine and say so with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST_STEP_TIMEOUT_S = 900.0  # a cold build on a loaded 2-core machine takes minutes


def first_step(store: Path, deadline: float) -> float:
    """Unix time of the run's first stored step, polled until ``deadline``."""
    while time.time() < deadline:
        if store.exists():
            try:
                db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
                row = db.execute("select min(ts) from steps").fetchone()
                db.close()
                if row and row[0] is not None:
                    return float(row[0])
            except sqlite3.Error:
                pass  # the supervisor is creating it
        time.sleep(0.2)
    raise TimeoutError(f"no step in {store} within {FIRST_STEP_TIMEOUT_S:.0f} s")


def phases_of(store: Path, began: float, stepped: float) -> list[dict[str, object]]:
    """(name, seconds, share) from the command's start to the first step."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    first_event = db.execute("select min(ts) from events").fetchone()[0]
    rows = db.execute("select ts, data from events where type = 'startup_phase' order by seq").fetchall()
    db.close()
    marks = [("launch", began), ("supervisor, trainer launch", first_event)]
    for ts, data in rows:  # a phase said twice in a row lasts from the first (before 2026-12-03 a
        phase = json.loads(data)["phase"]  # head start's trainer said importing after its supervisor)
        if phase != marks[-1][0]:
            marks.append((phase, ts))
    total = stepped - began
    out = []
    for (name, ts), (_, end) in zip(marks, [*marks[1:], ("", stepped)], strict=True):
        out.append({"phase": name, "s": round(end - ts, 2), "share": round((end - ts) / total, 3)})
    return out


def measure(extensions: Path, steps: int) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="mtsp", dir="/tmp"))
    env = dict(os.environ, MEMTUI_HOME=str(home), TORCH_EXTENSIONS_DIR=str(extensions))
    began = time.time()
    command = ["memtui", "run", "--preset", "tiny", "--steps", str(steps), "--detach"]
    subprocess.run(command, env=env, check=True, capture_output=True)
    (run_dir,) = (home / "runs").iterdir()
    store = run_dir / "telemetry.sqlite"
    try:
        stepped = first_step(store, began + FIRST_STEP_TIMEOUT_S)
        return {"to_first_step_s": round(stepped - began, 2), "phases": phases_of(store, began, stepped)}
    finally:
        subprocess.run(["memtui", "stop", str(run_dir)], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="empty the extensions dir first: the op is built")
    parser.add_argument(
        "--extensions", type=Path, help="TORCH_EXTENSIONS_DIR (default: the environment's or a /tmp one)"
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    extensions = args.extensions or Path(os.environ.get("TORCH_EXTENSIONS_DIR") or "/tmp/memtui-bench-ext")
    if args.cold:
        shutil.rmtree(extensions, ignore_errors=True)  # the op is built again
    result = {"cold": args.cold, "extensions": str(extensions), **measure(extensions, args.steps)}
    if args.json:
        print(json.dumps(result))
    else:
        kind = "cold" if args.cold else "warm"
        print(f"{kind}: first step {result['to_first_step_s']} s after the command")
        for phase in result["phases"]:  # type: ignore[attr-defined]
            print(f"  {phase['phase']:<28} {phase['s']:>7.2f} s  {phase['share']:>6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
