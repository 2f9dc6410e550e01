"""The store's SQLite file: its tables, the rows of events and meta, and its transactions.

``create_schema`` makes what a store needs where it is missing (a field added to
``TelemetrySample`` since the file was made gets its column), migrates an older file's
rows (version 1 kept a NaN as the text ``'NaN'`` and an inf as a REAL inf: both become
NULL named in ``nonfinite``, as ``row_codec`` writes them now) and writes nothing when
reopening a current file, so that a run on a full disk still opens. ``Transaction`` is
``BEGIN IMMEDIATE`` ... ``COMMIT``, safe when SQLite has already rolled back by itself.
Torch-free.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

from engine.domain import Event
from engine.run.storage.row_codec import NONFINITE_COLUMN, STEP_COLUMNS

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # PRAGMA user_version; 2: non-finite floats as NULL + ``nonfinite``
EVENT_INSERT = (
    "INSERT INTO events (seq, ts, type, severity, message, data, attempt) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def create_schema(db: sqlite3.Connection, version: int) -> None:
    """Tables, indexes and columns a store needs, made where missing (``version``: the
    file's ``user_version`` before)."""
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
    cols = ", ".join(f"{name} {sql}" for name, sql in {**STEP_COLUMNS, NONFINITE_COLUMN: "TEXT"}.items())
    with Transaction(db):
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
        decided = {row[1] for row in db.execute("PRAGMA table_info(decisions)")}
        if "operator" not in decided:  # the operator's decision, apart from the policy's verdict
            db.execute("ALTER TABLE decisions ADD COLUMN operator TEXT")
        have = {row[1] for row in db.execute("PRAGMA table_info(steps)")}
        for name, sql in {**STEP_COLUMNS, NONFINITE_COLUMN: "TEXT"}.items():  # added since the file was made
            if name not in have:
                db.execute(f"ALTER TABLE steps ADD COLUMN {name} {sql}")
        if 0 < version < 2:
            _move_nonfinite_floats(db)
        if version != SCHEMA_VERSION:  # no write at all reopening a current file (a full disk)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _move_nonfinite_floats(db: sqlite3.Connection) -> None:
    """Version 1 -> 2: every REAL column's ``'NaN'`` text and inf becomes NULL, named in
    ``nonfinite`` (one pass per column; once, inside the schema's transaction)."""
    for name in (n for n, sql in STEP_COLUMNS.items() if sql == "REAL"):
        value = f"CASE WHEN typeof({name}) = 'text' THEN 'nan' WHEN {name} > 0 THEN 'inf' ELSE '-inf' END"
        db.execute(
            f"UPDATE steps SET {NONFINITE_COLUMN} = json_set(COALESCE({NONFINITE_COLUMN}, '{{}}'),"
            f" '$.{name}', {value}), {name} = NULL"
            f" WHERE typeof({name}) = 'text' OR abs({name}) = 9e999"  # 9e999: SQLite's inf
        )


META_UPSERT = (
    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
)


def event_row(event: Event) -> tuple[Any, ...]:
    data = json.dumps(event.data, default=str)
    return (event.seq, event.ts, event.type, event.severity, event.message, data, event.attempt)


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on an exception).

    SQLite may have rolled back by itself already (it does on SQLITE_FULL and most I/O
    errors), and a COMMIT that fails may leave the transaction open: either way the
    connection ends outside any transaction, and the first error is the one raised."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
                return
            except BaseException:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("rollback failed", exc_info=True)
