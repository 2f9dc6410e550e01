"""Where a run's wall time went, from its store alone: kept steps, replayed steps, outages.

    python bench/run_cost.py RUN_DIR [RUN_DIR ...]

A step stored more than once was trained again after a restart: its newest sample is kept,
the earlier ones were replayed. An outage is a gap of more than ``OUTAGE_S`` between two
stored steps (a restart: a new trainer starting, a checkpoint loaded). Wall time runs from
the first to the last stored record (events or steps). Reads the store read-only.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
from pathlib import Path

OUTAGE_S = 2.0  # s between two stored steps; a tiny step takes ~0.03 s


def run_cost(store: Path) -> dict[str, float]:
    """Seconds and counts of ``store`` (a run's ``telemetry.sqlite``)."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    rows = db.execute("select id, step, ts, step_time_s from steps order by id").fetchall()
    first_event, last_event = db.execute("select min(ts), max(ts) from events").fetchone()
    wall = max(last_event, rows[-1][2]) - min(first_event, rows[0][2])
    newest = {step: rid for rid, step, _, _ in rows}
    replayed = [r for r in rows if newest[r[1]] != r[0]]
    gaps = [b[2] - a[2] for a, b in zip(rows, rows[1:], strict=False) if b[2] - a[2] > OUTAGE_S]
    return {
        "wall_s": wall,
        "steps_kept": len(newest),
        "steps_replayed": len(replayed),
        "step_s": sum(r[3] for r in rows),
        "replayed_s": sum(r[3] for r in replayed),
        "outages": len(gaps),
        "outage_s": sum(gaps),
        "median_step_s": statistics.median(r[3] for r in rows),
        "steps_per_wall_s": len(newest) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    for run in parser.parse_args().runs:
        cost = run_cost(run / "telemetry.sqlite")
        print(run.name, " ".join(f"{k}={v:.4g}" for k, v in cost.items()))


if __name__ == "__main__":
    main()
