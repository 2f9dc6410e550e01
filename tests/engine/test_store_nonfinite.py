"""Non-finite floats in the store: NULL in their column (so SQL over the store is right)
and named in ``nonfinite`` (so every reader gets them back); older stores' ``'NaN'`` text
still reads, and a writer migrates it."""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
from pathlib import Path

import pytest

from engine.run.storage.store import SCHEMA_VERSION, Store
from memtui.cli.inspection.export import export
from tests.engine.test_store import sample

LOSSES = [float("nan"), 2.0, float("inf"), 4.0]


def _write(path: Path) -> None:
    with Store(path) as store:
        for step, loss in enumerate(LOSSES, start=1):
            store.add_step(sample(step, loss=loss, grad_norm=-math.inf if step == 3 else 0.5))


def _as_version_1(path: Path) -> None:
    """What a version-1 store held: the text 'NaN' and a REAL inf, no ``nonfinite``."""
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE steps DROP COLUMN nonfinite")
    db.execute("UPDATE steps SET loss = 'NaN' WHERE step = 1")
    db.execute("UPDATE steps SET loss = 9e999, grad_norm = -9e999 WHERE step = 3")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()


def _sql(path: Path, query: str) -> tuple[object, ...]:
    db = sqlite3.connect(path)
    try:
        return tuple(db.execute(query).fetchone())
    finally:
        db.close()


def _assert_read_back(path: Path) -> None:
    with Store(path, readonly=True) as store:
        back = store.steps()
    assert math.isnan(back[0].loss) and back[2].loss == math.inf and back[2].grad_norm == -math.inf
    assert [s.loss for s in back[1::2]] == [2.0, 4.0]


def test_sql_average_of_the_loss_skips_non_finite_steps(tmp_path: Path) -> None:
    _write(tmp_path / "t.sqlite")
    avg, rows, flagged = _sql(
        tmp_path / "t.sqlite", "SELECT AVG(loss), COUNT(loss), COUNT(nonfinite) FROM steps"
    )
    assert (avg, rows, flagged) == (3.0, 2, 2)  # the finite losses 2 and 4; two steps flagged
    loss, grad = _sql(
        tmp_path / "t.sqlite",
        "SELECT json_extract(nonfinite, '$.loss'), json_extract(nonfinite, '$.grad_norm')"
        " FROM steps WHERE step = 3",
    )
    assert (loss, grad) == ("inf", "-inf")
    _assert_read_back(tmp_path / "t.sqlite")


def test_an_older_store_still_reads_and_a_writer_migrates_it(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _write(path)
    _as_version_1(path)
    _assert_read_back(path)  # read-only: the 'NaN' text as it was
    with Store(path):
        pass  # a writer (a resumed supervisor) opens it
    assert _sql(path, "PRAGMA user_version") == (SCHEMA_VERSION,)
    assert _sql(path, "SELECT AVG(loss), COUNT(nonfinite) FROM steps") == (3.0, 2)
    _assert_read_back(path)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_shows_nan_and_inf(tmp_path: Path, fmt: str) -> None:
    _write(tmp_path / "t.sqlite")
    out = io.StringIO()
    export(tmp_path / "t.sqlite", fmt, "steps", out)  # type: ignore[arg-type]
    if fmt == "csv":
        losses = [row["loss"] for row in csv.DictReader(io.StringIO(out.getvalue()))]
    else:
        losses = [str(json.loads(line)["loss"]) for line in out.getvalue().splitlines()]
    assert losses == ["nan", "2.0", "inf", "4.0"]
