"""``memtui export`` and the window reader, from a real (fabricated) store."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from engine.events import EvalCompleted
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.cli.main import main
from memtui.console.window_reader import read_window
from tests.fakes.run_script import make_sample


@pytest.fixture
def stored(run_dir: RunDir) -> RunDir:
    with Store(run_dir.store) as store:
        for step in range(1, 31):
            store.add_step(make_sample(step, ts=1000.0 + step, loss=math.nan if step == 3 else 2.0))
        store.append_event("run_started", message="run started")
        store.append_event("checkpoint_saved", message="checkpoint", data={"step": 20, "tag": "s20"})
    return run_dir


def test_export_steps_csv_to_stdout(stored: RunDir, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["export", stored.run_id]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["step"]) for r in rows] == list(range(1, 31)) and rows[2]["loss"] == "nan"


def test_export_events_jsonl_to_a_file(stored: RunDir, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    assert main(["export", stored.run_id, "--format", "jsonl", "--what", "events", "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["type"] for e in lines] == ["run_started", "checkpoint_saved"] and lines[1]["data"][
        "tag"
    ] == "s20"


def test_export_all(stored: RunDir, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["export", stored.run_id, "--format", "jsonl", "--what", "all"]) == 0
    records = [json.loads(line)["record"] for line in capsys.readouterr().out.splitlines()]
    assert records.count("step") == 30 and records.count("event") == 2
    assert main(["export", stored.run_id, "--what", "all"]) == 2  # csv needs a directory
    assert main(["export", stored.run_id, "--what", "all", "--out", str(tmp_path / "x")]) == 0
    assert (tmp_path / "x" / "steps.csv").exists() and (tmp_path / "x" / "events.csv").exists()


def test_export_without_a_store_fails_plainly(run_dir: RunDir, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["export", run_dir.run_id]) == 1
    assert "no telemetry" in capsys.readouterr().err


def test_read_window(stored: RunDir) -> None:
    whole = read_window(stored.store, "run", now=1030.0, buckets=10)
    assert len(whole) == 10 and whole[-1].step == 30
    recent = read_window(stored.store, "hour", now=1030.0 + 3600 - 10.5, buckets=100)
    assert [p.step for p in recent] == list(range(20, 31))
    assert read_window(stored.path / "nothing.sqlite", "run", now=0.0) == []


def test_export_evals_in_jsonl_and_csv(stored: RunDir, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with Store(stored.store) as store:
        for step, loss in ((10, 3.0), (20, 2.5)):
            done = EvalCompleted(step=step, loss=loss, batches=4, seconds=0.5, metrics={"acc": step / 100})
            store.append_event(done.event_type, data=done.data(), attempt=1)
    assert main(["export", stored.run_id, "--format", "jsonl", "--what", "evals"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["step"], e["loss"], e["metrics.acc"]) for e in lines] == [(10, 3.0, 0.1), (20, 2.5, 0.2)]
    assert main(["export", stored.run_id, "--what", "evals"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    last = rows[-1]
    assert (last["step"], last["loss"], last["batches"], last["metrics.acc"]) == ("20", "2.5", "4", "0.2")
    assert main(["export", stored.run_id, "--what", "all", "--out", str(tmp_path / "x")]) == 0
    assert len(list(csv.DictReader((tmp_path / "x" / "evals.csv").open()))) == 2
    assert main(["export", stored.run_id, "--format", "jsonl", "--what", "all"]) == 0
    records = [json.loads(line)["record"] for line in capsys.readouterr().out.splitlines()]
    assert records.count("eval") == 2
