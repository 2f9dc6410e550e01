"""``memtui export``: a run's step telemetry, events and evals from its store, as CSV or JSON lines.

Reads the store read-only (a live run keeps writing), streams page by page, torch-free.
CSV has one column per ``TelemetrySample`` field (steps) or per ``Event`` field (events,
``data`` as a JSON string), and for steps one ``metrics.NAME`` column per workload metric
the run reported (empty where a step did not); JSON lines have one object per row (the
metrics as an object under ``metrics``). ``all`` in JSON lines
tags each row with ``"record": "step" | "event"``; in CSV it needs a directory and writes
``steps.csv``, ``events.csv`` and ``evals.csv`` into it. ``evals`` has one row per eval (step,
held-out loss, batches, seconds, attempt, ts, then one ``metrics.NAME`` column per workload
scalar); ``all`` in JSON lines has them as ``"record": "eval"``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TextIO

from engine.domain import Event, TelemetrySample
from engine.run.reports.eval_history import eval_columns, stored_evals
from engine.run.reports.metric_history import METRIC_COLUMN, metric_names
from engine.run.storage.store import Store

ExportFormat = Literal["csv", "jsonl"]
ExportWhat = Literal["steps", "events", "evals", "all"]
PAGE_ROWS = 5000
STEP_FIELDS = list(TelemetrySample.model_fields)
METRIC_PREFIX = f"{METRIC_COLUMN}."
"""A CSV column of one workload metric: ``metrics.accuracy``."""
EVENT_FIELDS = list(Event.model_fields)


def iter_steps(store: Store) -> Iterator[dict[str, Any]]:
    """Every stored sample in arrival order, as plain values (NaN/inf stay floats)."""
    return (s.model_dump() for s in store.iter_steps(PAGE_ROWS))


def step_csv_fields(store: Store) -> list[str]:
    """The steps CSV's columns: the sample's fields, then a column per metric name."""
    fields = [f for f in STEP_FIELDS if f != METRIC_COLUMN]
    return fields + [METRIC_PREFIX + name for name in metric_names(store)]


def iter_flat_steps(store: Store) -> Iterator[dict[str, Any]]:
    """``iter_steps`` with each metric in its own ``metrics.NAME`` key (CSV's columns)."""
    for row in iter_steps(store):
        metrics = row.pop(METRIC_COLUMN, None) or {}
        yield {**row, **{METRIC_PREFIX + name: value for name, value in metrics.items()}}


def iter_events(store: Store) -> Iterator[dict[str, Any]]:
    seq = 0
    while page := store.events_since(seq, PAGE_ROWS):
        yield from (e.model_dump() for e in page)
        seq = page[-1].seq


def write_csv(rows: Iterator[dict[str, Any]], fields: list[str], out: TextIO) -> int:
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    count = 0
    for row in rows:
        if "data" in row:
            row = {**row, "data": json.dumps(row["data"], sort_keys=True)}
        writer.writerow(row)
        count += 1
    return count


def write_jsonl(rows: Iterator[dict[str, Any]], out: TextIO, record: str | None = None) -> int:
    count = 0
    for row in rows:
        body = {"record": record, **row} if record else row
        out.write(json.dumps(body, default=_json_value, allow_nan=True) + "\n")
        count += 1
    return count


def _json_value(value: Any) -> Any:
    return str(value) if isinstance(value, float) and not math.isfinite(value) else repr(value)


def export(store_path: Path, fmt: ExportFormat, what: ExportWhat, out: TextIO | Path) -> int:
    """Write the export to ``out`` (a stream, or a directory for CSV ``all``); returns rows written."""
    with Store(store_path, readonly=True) as store:
        if fmt == "csv" and what == "all":
            if not isinstance(out, Path):
                raise ValueError("--format csv --what all writes two files: give --out DIRECTORY")
            out.mkdir(parents=True, exist_ok=True)
            with open(out / "steps.csv", "w", newline="", encoding="utf-8") as steps_out:
                count = write_csv(iter_flat_steps(store), step_csv_fields(store), steps_out)
            with open(out / "events.csv", "w", newline="", encoding="utf-8") as events_out:
                count += write_csv(iter_events(store), EVENT_FIELDS, events_out)
            with open(out / "evals.csv", "w", newline="", encoding="utf-8") as evals_out:
                return count + _write_evals(store, "csv", evals_out)
        if isinstance(out, Path):
            with open(out, "w", newline="", encoding="utf-8") as stream:
                return _export_stream(store, fmt, what, stream)
        return _export_stream(store, fmt, what, out)


def _write_evals(store: Store, fmt: ExportFormat, out: TextIO, record: str | None = None) -> int:
    """One row per eval (there are few: read at once, so CSV knows every metric column)."""
    evals = stored_evals(store)
    rows = (e.row() for e in evals)
    return write_csv(rows, eval_columns(evals), out) if fmt == "csv" else write_jsonl(rows, out, record)


def _export_stream(store: Store, fmt: ExportFormat, what: ExportWhat, out: TextIO) -> int:
    if what == "evals":
        return _write_evals(store, fmt, out)
    if fmt == "csv":
        if what == "steps":
            return write_csv(iter_flat_steps(store), step_csv_fields(store), out)
        return write_csv(iter_events(store), EVENT_FIELDS, out)
    if what == "all":
        count = write_jsonl(iter_steps(store), out, "step") + write_jsonl(iter_events(store), out, "event")
        return count + _write_evals(store, fmt, out, "eval")
    return write_jsonl(iter_steps(store) if what == "steps" else iter_events(store), out)
