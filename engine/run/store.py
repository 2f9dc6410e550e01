"""The run's durable memory: every step sample, every event, the run's state.

One SQLite file per run (``telemetry.sqlite``) in WAL mode, so the supervisor writes while
``memtui status`` reads. Four tables:

* ``steps``  one column per ``TelemetrySample`` field, every sample kept. A resumed run
  repeats step numbers; the ``attempt`` column tells them apart and ``id`` keeps the order.
* ``events`` numbered by ``seq`` (AUTOINCREMENT: never reused, no gaps while one writer
  appends), committed before ``append_event`` returns.
* ``meta``   key -> JSON value: state, exit_reason, attempt, restarts, pids, times, read
  and written as a ``RunMeta`` (engine.run.meta).
* ``decisions`` one row per policy verdict on a directive (``DecisionRecord``), every one
  of a flood included; reasons, patch and bounds as JSON text.

Steps and decisions are buffered and written in batches (``flush``, one transaction);
events and meta are committed at once. SQLite stores NaN as NULL, so a NaN float is
written as the text ``'NaN'`` (REAL affinity leaves text it cannot parse alone) and read
back as ``float('nan')``.
Torch-free.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel

from engine.domain import DecisionRecord, Event, Severity, TelemetrySample
from engine.run.meta import RunMeta, meta_from_rows, meta_values

SCHEMA_VERSION = 1  # PRAGMA user_version
STEP_BATCH_ROWS = 256  # add_step flushes by itself once this many samples wait
_NAN_TEXT = "NaN"


class StoreError(RuntimeError):
    """The store file cannot be used (missing, newer schema, not a store)."""


# ------------------------------------------------------------------ steps schema


def _sql_type(annotation: Any) -> str:
    """SQLite column type for a TelemetrySample field annotation."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _sql_type(args[0]) if len(args) == 1 else "TEXT"
    if origin is Literal or annotation is str:
        return "TEXT"
    if annotation in (int, bool):
        return "INTEGER"
    if annotation is float:
        return "REAL"
    return "TEXT"


def _step_columns() -> dict[str, str]:
    return {name: _sql_type(f.annotation) for name, f in TelemetrySample.model_fields.items()}


STEP_COLUMNS: dict[str, str] = _step_columns()
"""Field name -> SQLite type; derived from the model so a new field gets a column."""


_JSON_COLUMNS = frozenset({"ranks"})
"""TelemetrySample fields that hold a list of models: stored as JSON text."""


def _encode_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return _NAN_TEXT
    if isinstance(value, list):
        return json.dumps([v.model_dump() if isinstance(v, BaseModel) else v for v in value])
    return value


def _decode_value(column_type: str, value: Any) -> Any:
    if column_type == "REAL" and isinstance(value, str):
        return float(value)  # 'NaN' (and any other text a float column was given)
    return value  # INTEGER 0/1 validates back into bool fields


# ------------------------------------------------------------------------ store


class Store:
    """SQLite store of one run. Not thread-safe: one event loop (or thread) uses it."""

    def __init__(self, path: Path, *, readonly: bool = False, batch_rows: int = STEP_BATCH_ROWS) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._batch_rows = batch_rows
        self._pending: list[TelemetrySample] = []
        self._pending_decisions: list[DecisionRecord] = []
        if readonly:
            if not self.path.exists():
                raise StoreError(f"{self.path}: no such store")
            uri = self.path.resolve().as_uri() + "?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 5000")  # ms: wait out a writer's checkpoint
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            self._db.close()
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this memtui's ({SCHEMA_VERSION})"
            )
        if not readonly:
            self._create_schema()
        self._columns = self._existing_step_columns()

    # ------------------------------------------------------------------- schema

    def _create_schema(self) -> None:
        db = self._db
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
        cols = ", ".join(f"{name} {sql}" for name, sql in STEP_COLUMNS.items())
        with self._transaction():
            db.execute(f"CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, {cols})")
            db.execute("CREATE INDEX IF NOT EXISTS steps_step ON steps(step)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL,"
                " type TEXT NOT NULL, severity TEXT NOT NULL, message TEXT NOT NULL,"
                " data TEXT NOT NULL, attempt INTEGER)"
            )
            # the newest event of a type (the last save, for every status) without a scan
            db.execute("CREATE INDEX IF NOT EXISTS events_type ON events(type, seq)")
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS decisions (id INTEGER PRIMARY KEY, ts REAL NOT NULL,"
                " decision_id TEXT NOT NULL, directive_id TEXT NOT NULL, source TEXT NOT NULL,"
                " verdict TEXT NOT NULL, state TEXT NOT NULL, reasons TEXT NOT NULL,"
                " patch TEXT NOT NULL, bounds TEXT NOT NULL, policy_revision TEXT NOT NULL,"
                " rate_limited INTEGER NOT NULL)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS decisions_directive ON decisions(directive_id)")
            have = {row[1] for row in db.execute("PRAGMA table_info(steps)")}
            for name, sql in STEP_COLUMNS.items():  # a field added since the file was made
                if name not in have:
                    db.execute(f"ALTER TABLE steps ADD COLUMN {name} {sql}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _existing_step_columns(self) -> list[str]:
        have = {row[1] for row in self._db.execute("PRAGMA table_info(steps)")}
        return [name for name in STEP_COLUMNS if name in have]

    def _has_tables(self) -> bool:
        """False for a read-only view of a store whose writer has not created it yet."""
        return bool(self._columns)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def journal_mode(self) -> str:
        return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    # ------------------------------------------------------------------- events

    def append_event(
        self,
        type: str,
        *,
        severity: Severity = "info",
        message: str = "",
        data: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> Event:
        """Number, store and commit one event; it is durable when this returns."""
        self._writable()
        self.flush()  # keep the file in time order: steps before the event that follows them
        ts = time.time()
        data = dict(data or {})
        event = Event(seq=1, ts=ts, type=type, severity=severity, message=message, data=data, attempt=attempt)
        with self._transaction():
            cur = self._db.execute(
                "INSERT INTO events (ts, type, severity, message, data, attempt) VALUES (?, ?, ?, ?, ?, ?)",
                (ts, event.type, event.severity, event.message, json.dumps(data, default=str), attempt),
            )
        seq = cur.lastrowid
        assert seq is not None
        return event.model_copy(update={"seq": seq})

    def events_since(self, seq: int, limit: int | None = None) -> list[Event]:
        """Events with seq > ``seq`` in seq order, at most ``limit``."""
        if not self._has_tables():
            return []
        rows = self._db.execute(
            "SELECT seq, ts, type, severity, message, data, attempt FROM events"
            " WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, -1 if limit is None else limit),
        ).fetchall()
        return [
            Event(seq=s, ts=ts, type=t, severity=sev, message=msg, data=json.loads(d), attempt=a)
            for s, ts, t, sev, msg, d, a in rows
        ]

    def last_seq(self) -> int:
        if not self._has_tables():
            return 0
        return int(self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])

    def newest_event(self, types: tuple[str, ...]) -> Event | None:
        """The newest event of one of ``types``, or None (read from the newest back)."""
        if not self._has_tables() or not types:
            return None
        row = self._db.execute(
            "SELECT seq, ts, type, severity, message, data, attempt FROM events"
            f" WHERE type IN ({', '.join('?' * len(types))}) ORDER BY seq DESC LIMIT 1",
            types,
        ).fetchone()
        if row is None:
            return None
        s, ts, t, sev, msg, d, a = row
        return Event(seq=s, ts=ts, type=t, severity=sev, message=msg, data=json.loads(d), attempt=a)

    # -------------------------------------------------------------------- steps

    def add_step(self, sample: TelemetrySample) -> None:
        """Buffer one sample; written by ``flush`` (or here, once a batch is full)."""
        self._writable()
        self._pending.append(sample)
        if len(self._pending) >= self._batch_rows:
            self.flush()

    def flush(self) -> int:
        """Write buffered samples and decisions in one transaction; returns how many samples."""
        if not self._pending and not self._pending_decisions:
            return 0
        rows, self._pending = self._pending, []
        decisions, self._pending_decisions = self._pending_decisions, []
        names = list(STEP_COLUMNS)
        sql = f"INSERT INTO steps ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        with self._transaction():
            self._db.executemany(sql, [[_encode_value(getattr(s, n)) for n in names] for s in rows])
            self._db.executemany(_DECISION_INSERT, [_decision_row(d) for d in decisions])
        return len(rows)

    def steps(self, since_step: int | None = None, limit: int | None = None) -> list[TelemetrySample]:
        """Samples with step > ``since_step`` (all if None) in the order they arrived."""
        self._flush_if_writable()
        if not self._has_tables():
            return []
        where, args = ("WHERE step > ?", [since_step]) if since_step is not None else ("", [])
        rows = self._db.execute(
            f"SELECT {', '.join(self._columns)} FROM steps {where} ORDER BY id LIMIT ?",
            [*args, -1 if limit is None else limit],
        ).fetchall()
        return [self._sample(row) for row in rows]

    def iter_steps(
        self, page_rows: int = 5000, *, since_ts: float | None = None
    ) -> Iterator[TelemetrySample]:
        """Every sample in arrival order, ``page_rows`` at a time (keyset paging on the row id:
        a resumed attempt's repeated step numbers are all kept, none skipped at a page edge);
        with ``since_ts``, from the first sample stamped at or after it (see ``_first_id``)."""
        self._flush_if_writable()
        if not self._has_tables():
            return
        last_id = 0 if since_ts is None else self._first_id(since_ts) - 1
        while True:
            rows = self._db.execute(
                f"SELECT id, {', '.join(self._columns)} FROM steps WHERE id > ? ORDER BY id LIMIT ?",
                [last_id, page_rows],
            ).fetchall()
            yield from (self._sample(row[1:]) for row in rows)
            if len(rows) < page_rows:
                return
            last_id = rows[-1][0]

    def count_steps(self, since_ts: float | None = None) -> int:
        """How many samples ``iter_steps(since_ts=since_ts)`` yields (as of now)."""
        self._flush_if_writable()
        if not self._has_tables():
            return 0
        first = 0 if since_ts is None else self._first_id(since_ts)
        return int(self._db.execute("SELECT COUNT(*) FROM steps WHERE id >= ?", (first,)).fetchone()[0])

    def _first_id(self, since_ts: float) -> int:
        """Row id of the first sample with ts >= ``since_ts`` (one past the newest if none).

        A binary search over row ids, a few dozen primary-key lookups, no index on ts:
        samples are appended as they arrive, so ts grows with the id (all attempts)."""
        lo, hi = self._db.execute(
            "SELECT COALESCE(MIN(id), 1), COALESCE(MAX(id), 0) + 1 FROM steps"
        ).fetchone()
        while lo < hi:
            mid = (lo + hi) // 2
            row = self._db.execute(
                "SELECT id, ts FROM steps WHERE id >= ? ORDER BY id LIMIT 1", (mid,)
            ).fetchone()
            if row is None or row[1] >= since_ts:
                hi = mid
            else:
                lo = row[0] + 1
        return int(lo)

    def latest_step(self) -> TelemetrySample | None:
        """The newest sample (buffered or stored), or None."""
        if self._pending:
            return self._pending[-1]
        if not self._has_tables():
            return None
        row = self._db.execute(
            f"SELECT {', '.join(self._columns)} FROM steps ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else self._sample(row)

    def latest_rank_report(self) -> TelemetrySample | None:
        """The newest sample that carries every rank's memory (``ranks``), or None.

        Reports come every few steps, so the backward scan by row id stops within a few
        rows; callers ask only for runs with several ranks (one rank has none to find)."""
        pending = [s for s in self._pending if s.ranks]
        if pending:
            return pending[-1]
        if not self._has_tables() or "ranks" not in self._columns:
            return None
        row = self._db.execute(
            f"SELECT {', '.join(self._columns)} FROM steps WHERE ranks IS NOT NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else self._sample(row)

    def _sample(self, row: tuple[Any, ...]) -> TelemetrySample:
        values = {n: _decode_value(STEP_COLUMNS[n], v) for n, v in zip(self._columns, row, strict=False)}
        for name in _JSON_COLUMNS.intersection(values):
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        return TelemetrySample.model_validate(
            {k: v for k, v in values.items() if v is not None or k in _NULLABLE}
        )

    # ---------------------------------------------------------------- decisions

    def add_decision(self, decision: DecisionRecord) -> None:
        """Buffer one verdict; written by the next ``flush`` (the supervisor's, every 0.5 s,
        or an event's), so a flood costs one transaction per batch, not one per verdict."""
        self._writable()
        self._pending_decisions.append(decision)
        if len(self._pending_decisions) >= DECISION_BATCH_ROWS:
            self.flush()

    def decisions(
        self, since_id: int = 0, limit: int | None = None, directive_id: str | None = None
    ) -> list[tuple[int, DecisionRecord]]:
        """(row id, verdict) with id > ``since_id`` in the order given, at most ``limit``."""
        self._flush_if_writable()
        if not self._has_table("decisions"):
            return []
        where = "WHERE id > ?"
        args: list[Any] = [since_id]
        if directive_id is not None:
            where += " AND directive_id = ?"
            args.append(directive_id)
        rows = self._db.execute(
            f"SELECT id, {', '.join(_DECISION_COLUMNS)} FROM decisions {where} ORDER BY id LIMIT ?",
            [*args, -1 if limit is None else limit],
        ).fetchall()
        return [(row[0], _decision_from(row[1:])) for row in rows]

    def decision_count(self) -> int:
        self._flush_if_writable()
        if not self._has_table("decisions"):
            return 0
        return int(self._db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0])

    def _has_table(self, name: str) -> bool:
        """False for a store made before the table existed, opened read-only."""
        found = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return found.fetchone() is not None

    # --------------------------------------------------------------------- meta

    def update_meta(self, **fields: Any) -> None:
        """Set several meta keys in one transaction; each is validated by ``RunMeta``
        (an unknown key or a wrong type raises ``MetaError``, and nothing is written)."""
        self._writable()
        values = meta_values(fields)
        with self._transaction():
            self._db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def read_meta(self) -> RunMeta:
        """The run's meta; keys this version does not know are left aside (``engine.run.meta``)."""
        if not self._has_tables():
            return RunMeta()
        return meta_from_rows(self._db.execute("SELECT key, value FROM meta"))

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Flush buffered samples and close; safe to call twice."""
        if self._db is None:
            return
        if not self.readonly:
            self.flush()
        self._db.close()
        self._db = None  # type: ignore[assignment]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"{self.path}: opened read-only")

    def _flush_if_writable(self) -> None:
        if not self.readonly:
            self.flush()


# Optional fields whose NULL means None (not "missing"); other NULLs are left to defaults.
_NULLABLE = frozenset(
    name for name, f in TelemetrySample.model_fields.items() if not f.is_required() and f.default is None
)


DECISION_BATCH_ROWS = 2048  # add_decision flushes by itself once this many verdicts wait
_DECISION_COLUMNS = (
    "ts",
    "decision_id",
    "directive_id",
    "source",
    "verdict",
    "state",
    "reasons",
    "patch",
    "bounds",
    "policy_revision",
    "rate_limited",
)
_DECISION_JSON = frozenset({"reasons", "patch", "bounds"})
_DECISION_INSERT = (
    f"INSERT INTO decisions ({', '.join(_DECISION_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(_DECISION_COLUMNS))})"
)


def _decision_row(decision: DecisionRecord) -> list[Any]:
    values = decision.model_dump(mode="json")
    return [json.dumps(values[c]) if c in _DECISION_JSON else values[c] for c in _DECISION_COLUMNS]


def _decision_from(row: tuple[Any, ...]) -> DecisionRecord:
    pairs = zip(_DECISION_COLUMNS, row, strict=True)
    values = {c: json.loads(v) if c in _DECISION_JSON else v for c, v in pairs}
    return DecisionRecord.model_validate(values)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on an exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
