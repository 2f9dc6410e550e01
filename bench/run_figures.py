"""Run-wide figures on a big store: the throughput sums and the endurance report.

Makes a store of ``--rows`` step samples over ``--attempts`` attempts (copied with SQL, in
seconds), then times a full ``throughput_of`` (what ``memtui status`` of a stopped run
does), an incremental ``ThroughputTally.update`` after ``--more`` new rows (what the
supervisor does per status answer), and ``endurance_report`` (``memtui report``).

    python bench/run_figures.py [--rows 1000000] [--attempts 4] [--more 1000]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config.config_file import build_run_config  # noqa: E402
from engine.domain import TelemetrySample  # noqa: E402
from engine.run.directory import RunDir  # noqa: E402
from engine.run.reports.endurance_report import endurance_report  # noqa: E402
from engine.run.reports.throughput import ThroughputTally, throughput_of  # noqa: E402
from engine.run.storage.store import Store  # noqa: E402


def _fill(run: RunDir, rows: int, attempts: int) -> None:
    """``rows`` samples, attempt k covering steps of its share (no replays: the cost is the rows)."""
    with Store(run.store) as store:
        store.add_step(
            TelemetrySample(
                step=1,
                ts=1.0,
                samples=8,
                tokens=8,
                loss=1.0,
                lr=1e-3,
                step_time_s=0.01,
                tokens_per_s=1000.0,
                micro_batch=1,
                grad_accum=1,
            )
        )
        store.flush()
    db = sqlite3.connect(run.store)
    cols = [r[1] for r in db.execute("PRAGMA table_info(steps)") if r[1] != "id"]
    per = rows // attempts
    exprs = {
        "step": "n.x",
        "attempt": f"1 + (n.x - 1) / {per}",
        "ts": "n.x * 0.05",
        "tokens_per_s": "1000.0 + (n.x % 97)",
    }
    select = ", ".join(exprs.get(c, c) for c in cols)
    db.execute(
        f"WITH RECURSIVE n(x) AS (SELECT 2 UNION ALL SELECT x + 1 FROM n WHERE x < {rows}) "
        f"INSERT INTO steps ({', '.join(cols)}) SELECT {select} FROM steps, n"
    )
    db.commit()
    db.close()


def _timed(label: str, fn) -> object:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    print(f"{label:<44} {1000 * (time.perf_counter() - start):8.1f} ms")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--attempts", type=int, default=4)
    parser.add_argument("--more", type=int, default=1000)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    try:
        run = RunDir.create(build_run_config(steps=args.rows), home=home)
        _timed(f"fill {args.rows:,} rows", lambda: _fill(run, args.rows, args.attempts))
        with Store(run.store) as store:
            _timed("throughput_of (full read)", lambda: throughput_of(store))
            tally = ThroughputTally()
            _timed("ThroughputTally first update", lambda: tally.update(store))
            for i in range(args.more):
                store.add_step(
                    TelemetrySample(
                        step=args.rows + i + 1,
                        ts=1e9 + i,
                        attempt=args.attempts,
                        samples=8,
                        tokens=8,
                        loss=1.0,
                        lr=1e-3,
                        step_time_s=0.01,
                        tokens_per_s=1000.0,
                        micro_batch=1,
                        grad_accum=1,
                    )
                )
            store.flush()
            _timed(
                f"ThroughputTally update (+{args.more} rows) + figures", lambda: tally.update(store).figures()
            )
            _timed("endurance_report", lambda: endurance_report(run, store))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
