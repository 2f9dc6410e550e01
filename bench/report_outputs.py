"""The report page and the TensorBoard export of a long run: time and size.

Makes a store of ``--rows`` step samples (copied with SQL: a falling loss with spikes,
tokens/s and memory that wobble, an fp16 loss scale that halves and grows back) and one
chaos injection every ``--chaos-every`` steps (each with a trainer restart), like
``memtui endure``'s 100,000-step run in docs/endurance.md; then times ``memtui report
--html`` (store read, downsampling, page) and ``memtui export --format tensorboard``, and
prints the page's size (``--keep DIR`` keeps the page and the event file).

    python bench/report_outputs.py [--rows 100000] [--chaos-every 1000] [--keep DIR]

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
from engine.events import ChaosInjected, TrainerRestarted  # noqa: E402
from engine.run.directory import RunDir  # noqa: E402
from engine.run.storage.store import Store  # noqa: E402
from memtui.cli.inspection.tensorboard_export import export_tensorboard  # noqa: E402
from memtui.cli.runs.endurance_commands import read_page  # noqa: E402

T0 = 1_790_000_000.0
STEP_S = 0.4
"""Seconds per step of the made-up run (the tiny preset's order on the 2-core machine)."""


def _fill(run: RunDir, rows: int, chaos_every: int) -> None:
    first = TelemetrySample(
        step=1, ts=T0, samples=8, tokens=1024, loss=5.5, lr=3e-3, step_time_s=STEP_S, tokens_per_s=2560.0,
        loss_scale=65536.0, mem_allocated=300 * 2**20, mem_reserved=420 * 2**20, mem_budget=2**30,
        micro_batch=8, grad_accum=1,
    )  # fmt: skip
    with Store(run.store) as store:
        store.add_step(first)
        for k in range(chaos_every, rows, chaos_every):
            injected = ChaosInjected(chaos_id=f"c{k}", kind="kill", source="schedule", step=k)
            store.append_event(injected.event_type, message=f"chaos kill at step {k}", data=injected.data())
            restarted = TrainerRestarted(
                cause="killed", returncode=-9, last_step=k, delay_s=1, restarts=1, streak=1, next_attempt=2
            )
            store.append_event(restarted.event_type, message="trainer restarted", data=restarted.data())
    db = sqlite3.connect(run.store)
    step = "COALESCE(json_extract(data, '$.step'), json_extract(data, '$.last_step'), 0)"
    db.execute(f"UPDATE events SET ts = ? + {step} * ? + 0.1", (T0, STEP_S))  # just after the step
    cols = [r[1] for r in db.execute("PRAGMA table_info(steps)") if r[1] != "id"]
    exprs = {
        "step": "n.x",
        "ts": f"{T0} + n.x * {STEP_S}",
        "loss": "1.5 + 4.0 / (1 + n.x / 2000.0) + (n.x % 1777 = 0) * 2.0",
        "tokens_per_s": "2400.0 + (n.x * 7919 % 400)",
        "mem_allocated": f"{300 * 2**20} + (n.x * 104729 % {40 * 2**20})",
        "loss_scale": "65536.0 / (1 << (n.x % 5000 / 1000))",
    }
    select = ", ".join(exprs.get(c, c) for c in cols)
    db.execute(
        f"WITH RECURSIVE n(x) AS (SELECT 2 UNION ALL SELECT x + 1 FROM n WHERE x < {rows}) "
        f"INSERT INTO steps ({', '.join(cols)}) SELECT {select} FROM steps, n"
    )
    db.commit()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--chaos-every", type=int, default=1000)
    parser.add_argument("--keep", type=Path, help="write the page and the TensorBoard run here")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    out = args.keep or home / "out"
    out.mkdir(parents=True, exist_ok=True)
    try:
        run = RunDir.create(build_run_config(name="long", steps=args.rows), home=home)
        _fill(run, args.rows, args.chaos_every)
        start = time.perf_counter()
        page = read_page(run)
        print(f"report --html, {args.rows:,} steps: {time.perf_counter() - start:8.2f} s, "
              f"{len(page.encode()) / 1024:,.0f} KiB")  # fmt: skip
        (out / "report.html").write_text(page, encoding="utf-8")
        start = time.perf_counter()
        points = export_tensorboard(run.store, out / "tensorboard")
        size = sum(f.stat().st_size for f in (out / "tensorboard").iterdir())
        print(f"export --format tensorboard:  {time.perf_counter() - start:8.2f} s, "
              f"{points:,} points, {size / 2**20:,.1f} MiB")  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
