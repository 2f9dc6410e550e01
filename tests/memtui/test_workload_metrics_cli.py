"""A workload's own metrics from a stored run: a column each in ``export``'s CSV, an object in
its JSON lines, the newest step's in ``status --json``, each one's newest value in ``report``;
and the store's own record of them (JSON text, names and newest values read by SQL)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest

from engine.run.directory import RunDir
from engine.run.reports.metric_history import last_metrics, metric_names
from engine.run.storage.store import Store
from memtui.cli.main import main
from tests.fakes.run_script import make_sample


def metrics_of(step: int) -> dict[str, float] | None:
    """accuracy every step, ppl on even steps only, none at all on step 3."""
    if step == 3:
        return None
    return {"accuracy": step / 10, **({"ppl": 100.0 / step} if step % 2 == 0 else {})}


@pytest.fixture
def stored(run_dir: RunDir) -> RunDir:
    with Store(run_dir.store) as store:
        for step in range(1, 6):
            store.add_step(make_sample(step, ts=1000.0 + step, metrics=metrics_of(step)))
    return run_dir


def test_the_store_keeps_each_steps_metrics_and_reads_names_and_newest_values(stored: RunDir) -> None:
    with Store(stored.store, readonly=True) as store:
        assert [s.metrics for s in store.steps()] == [metrics_of(s) for s in range(1, 6)]
        assert metric_names(store) == ["accuracy", "ppl"]
        assert last_metrics(store) == {"accuracy": 0.5, "ppl": 25.0}  # ppl from step 4


def test_a_store_from_before_metrics_has_none(run_dir: RunDir) -> None:
    with Store(run_dir.store) as store:
        store.add_step(make_sample(1))
    db = sqlite3.connect(run_dir.store)
    db.execute("ALTER TABLE steps DROP COLUMN metrics")
    db.commit()
    db.close()
    with Store(run_dir.store, readonly=True) as store:
        assert metric_names(store) == [] and last_metrics(store) == {}
        assert store.steps()[0].metrics is None


def test_export_csv_has_a_column_per_metric(stored: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", stored.run_id]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert "metrics" not in rows[0] and rows[0]["metrics.accuracy"] == "0.1"
    assert [r["metrics.ppl"] for r in rows] == ["", "50.0", "", "25.0", ""]
    assert rows[2]["metrics.accuracy"] == ""  # step 3 reported none


def test_export_jsonl_has_the_metrics_object(stored: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", stored.run_id, "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["metrics"] for r in rows] == [metrics_of(s) for s in range(1, 6)]


def test_status_json_has_the_newest_steps_metrics(stored: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", stored.run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == {"accuracy": 0.5}


def test_report_gives_each_metrics_newest_value(stored: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", stored.run_id]) == 0
    text = capsys.readouterr().out
    assert "## Workload metrics (newest value)" in text
    assert "| accuracy | 0.5 |" in text and "| ppl | 25 |" in text
    assert main(["report", stored.run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == {"accuracy": 0.5, "ppl": 25.0}
