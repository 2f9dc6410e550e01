"""The run's durable memory: every step sample, every event, the run's state.

One SQLite file per run (``telemetry.sqlite``) in WAL mode, so the supervisor writes while
``memtui status`` reads. Four tables:

* ``steps``  one column per ``TelemetrySample`` field, every sample kept. A resumed run
  repeats step numbers; the ``attempt`` column tells them apart and ``id`` keeps the order.
* ``events`` numbered by ``seq`` (AUTOINCREMENT: never reused, no gaps while one writer
  appends), committed before ``append_event`` returns (but see storage faults below).
* ``meta``   key -> JSON value: state, exit_reason, attempt, restarts, pids, times, read
  and written as a ``RunMeta`` (engine.run.meta).
* ``decisions`` one row per policy verdict on a directive (``DecisionRecord``), every one
  of a flood included; reasons, patch and bounds as JSON text.

Steps and decisions are buffered and written in batches (``flush``, one transaction);
events and meta are committed at once. How rows are made is ``engine.run.storage.row_codec``, the
tables and transactions ``engine.run.storage.store_file``.

**Storage faults.** A write the disk refuses (full, a quota, I/O errors: which ones is
``engine.run.storage.storage_fault``) raises nothing and loses nothing: what was to be written
stays in the store's ``Backlog`` (``engine.run.storage.store_backlog``, bounded), ``fault`` says
why, and ``on_fault`` is told once. Until ``retry`` gets it all through, the other writes
only add to the backlog (an event still gets its seq at once, the one it will be stored
under), and the reads the supervisor serves include what waits: ``events_since``,
``last_seq``, ``read_meta``, ``latest_step``. Other errors raise as before.
Torch-free.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.domain import DecisionRecord, Event, Severity, TelemetrySample
from engine.run.meta import RunMeta, meta_from_rows, meta_values
from engine.run.storage.row_codec import (
    DECISION_COLUMNS,
    DECISION_INSERT,
    STEP_INSERT,
    decision_from,
    decision_row,
    readable_step_columns,
    sample_from,
    step_row,
)
from engine.run.storage.storage_fault import storage_fault
from engine.run.storage.store_backlog import HELD_ROWS_MAX, Backlog
from engine.run.storage.store_file import (
    EVENT_INSERT,
    META_UPSERT,
    SCHEMA_VERSION,
    Transaction,
    create_schema,
    event_row,
)

log = logging.getLogger(__name__)

STEP_BATCH_ROWS = 256  # add_step flushes by itself once this many samples wait
DECISION_BATCH_ROWS = 2048  # add_decision flushes by itself once this many verdicts wait


class StoreError(RuntimeError):
    """The store file cannot be used (missing, newer schema, not a store)."""


def damaged(path: Path, err: BaseException) -> str:
    """One line for a store file SQLite cannot read: what is wrong, and what still can be
    done (the run's checkpoints beside it are files of their own: none is lost with it)."""
    return (
        f"{path}: damaged, not a store that can be read ({err}); the run's checkpoints are files of "
        f"their own: `memtui checkpoints {path.parent.name}` lists those that verify"
    )


# ------------------------------------------------------------------------ store


class Store:
    """SQLite store of one run. Not thread-safe: one event loop (or thread) uses it."""

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool = False,
        batch_rows: int = STEP_BATCH_ROWS,
        held_rows: int = HELD_ROWS_MAX,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._batch_rows = batch_rows
        self._held = Backlog(limit=max(held_rows, batch_rows))
        self.fault: str | None = None
        """Why the disk refuses writes (``storage_fault``'s words); None while it takes them."""
        self.fault_since: float | None = None
        """Unix time (s) of the first refused write of the current fault."""
        self.on_fault: Callable[[str], None] | None = None
        """Told (with ``fault``) when a write is first refused; not again until one succeeds."""
        if readonly:
            if not self.path.exists():
                raise StoreError(f"{self.path}: no such store")
            uri = self.path.resolve().as_uri() + "?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 5000")  # ms: wait out a writer's checkpoint
        try:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as err:  # truncated, zeroed, or not SQLite at all
            self._db.close()
            raise StoreError(damaged(self.path, err)) from None
        if version > SCHEMA_VERSION:
            self._db.close()
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this memtui's ({SCHEMA_VERSION})"
            )
        if not readonly:
            create_schema(self._db, version)
        self._columns = self._existing_step_columns()
        self._stored_seq = self._stored_last_seq()  # the writer's: events are numbered from it

    # ------------------------------------------------------------------- schema

    def _existing_step_columns(self) -> list[str]:
        have = {row[1] for row in self._db.execute("PRAGMA table_info(steps)")}
        return readable_step_columns(have)

    def _has_tables(self) -> bool:
        """False for a read-only view of a store whose writer has not created it yet."""
        return bool(self._columns)

    def _transaction(self) -> Transaction:
        return Transaction(self._db)

    def damage(self) -> str | None:
        """What SQLite's ``quick_check`` finds wrong with the file, in one line; None when it
        finds nothing. Reads the whole file (a second or so for a long run's store)."""
        try:
            found = [str(row[0]) for row in self._db.execute("PRAGMA quick_check(3)")]
        except sqlite3.DatabaseError as err:
            return str(err)
        return None if found == ["ok"] else "; ".join(found)

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
        """Number, store and commit one event; it is durable when this returns, or, while
        the disk refuses writes, held with the seq it will be stored under."""
        self._writable()
        event = Event(
            seq=self._stored_seq + len(self._held.events) + 1,
            ts=time.time(),
            type=type,
            severity=severity,
            message=message,
            data=dict(data or {}),
            attempt=attempt,
        )
        self._held.events.append(event)
        self.flush()  # with the steps before it: the file stays in time order
        return event

    def events_since(self, seq: int, limit: int | None = None) -> list[Event]:
        """Events with seq > ``seq`` in seq order, at most ``limit`` (held ones included)."""
        held = [e for e in self._held.events if e.seq > seq]
        if not self._has_tables():
            return held[:limit]
        rows = self._db.execute(
            "SELECT seq, ts, type, severity, message, data, attempt FROM events"
            " WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, -1 if limit is None else limit),
        ).fetchall()
        stored = [
            Event(seq=s, ts=ts, type=t, severity=sev, message=msg, data=json.loads(d), attempt=a)
            for s, ts, t, sev, msg, d, a in rows
        ]
        return (stored + held)[:limit]

    def last_seq(self) -> int:
        """The newest event's seq (a held one's included)."""
        if self._held.events:
            return self._held.events[-1].seq
        return self._stored_last_seq()

    def _stored_last_seq(self) -> int:
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
        if self._held.add_step(sample) and len(self._held.steps) >= self._batch_rows:
            self.flush()

    def flush(self) -> int:
        """Write everything buffered in one transaction; returns how many samples.

        While the disk refuses writes (``fault``) it tries nothing and returns 0: the
        supervisor's ``retry`` paces the attempts then."""
        if self.fault is not None or self.readonly:
            return 0
        return self._write()

    def retry(self) -> bool:
        """Try to write everything held; True once the store took it all (no fault left)."""
        self._write()
        return self.fault is None

    @property
    def held(self) -> Backlog:
        """What waits to be written (to describe it: ``describe``, ``take_dropped``)."""
        return self._held

    def _write(self) -> int:
        held = self._held
        if held.empty:
            self.fault = self.fault_since = None
            return 0
        try:
            with self._transaction():
                self._db.executemany(STEP_INSERT, [step_row(s) for s in held.steps])
                self._db.executemany(DECISION_INSERT, [decision_row(d) for d in held.decisions])
                self._db.executemany(EVENT_INSERT, [event_row(e) for e in held.events])
                self._db.executemany(META_UPSERT, [(k, json.dumps(v)) for k, v in held.meta.items()])
        except (sqlite3.Error, OSError) as err:
            reason = storage_fault(err)
            if reason is None:
                raise
            self._refused(reason)
            return 0
        written = len(held.steps)
        if held.events:
            self._stored_seq = held.events[-1].seq
        held.committed()
        self.fault = self.fault_since = None
        return written

    def _refused(self, reason: str) -> None:
        first = self.fault is None
        self.fault = reason
        if first:
            self.fault_since = time.time()
            if self.on_fault is not None:
                self.on_fault(reason)

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
        return [sample_from(self._columns, row) for row in rows]

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
            yield from (sample_from(self._columns, row[1:]) for row in rows)
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

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only ``sql`` over the stored tables (buffered steps flushed first);
        [] before the writer has made them. For aggregates (``engine.run.reports.throughput``)."""
        self._flush_if_writable()
        if not self._has_tables():
            return []
        return list(self._db.execute(sql, args).fetchall())

    def latest_step(self) -> TelemetrySample | None:
        """The newest sample (buffered or stored), or None."""
        if self._held.steps:
            return self._held.steps[-1]
        if not self._has_tables():
            return None
        row = self._db.execute(
            f"SELECT {', '.join(self._columns)} FROM steps ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else sample_from(self._columns, row)

    def latest_rank_report(self) -> TelemetrySample | None:
        """The newest sample that carries every rank's memory (``ranks``), or None.

        Reports come every few steps, so the backward scan by row id stops within a few
        rows; callers ask only for runs with several ranks (one rank has none to find)."""
        pending = [s for s in self._held.steps if s.ranks]
        if pending:
            return pending[-1]
        if not self._has_tables() or "ranks" not in self._columns:
            return None
        row = self._db.execute(
            f"SELECT {', '.join(self._columns)} FROM steps WHERE ranks IS NOT NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else sample_from(self._columns, row)

    # ---------------------------------------------------------------- decisions

    def add_decision(self, decision: DecisionRecord) -> None:
        """Buffer one verdict; written by the next ``flush`` (the supervisor's, every 0.5 s,
        or an event's), so a flood costs one transaction per batch, not one per verdict."""
        self._writable()
        if self._held.add_decision(decision) and len(self._held.decisions) >= DECISION_BATCH_ROWS:
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
        have = {row[1] for row in self._db.execute("PRAGMA table_info(decisions)")}
        picked = ", ".join(c if c in have else f"NULL AS {c}" for c in DECISION_COLUMNS)  # an older file
        rows = self._db.execute(
            f"SELECT id, {picked} FROM decisions {where} ORDER BY id LIMIT ?",
            [*args, -1 if limit is None else limit],
        ).fetchall()
        return [(row[0], decision_from(row[1:])) for row in rows]

    def _has_table(self, name: str) -> bool:
        """False for a store made before the table existed, opened read-only."""
        found = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return found.fetchone() is not None

    # --------------------------------------------------------------------- meta

    def update_meta(self, **fields: Any) -> None:
        """Set several meta keys in one transaction; each is validated by ``RunMeta``
        (an unknown key or a wrong type raises ``MetaError``, and nothing is written)."""
        self._writable()
        self._held.meta.update(meta_values(fields))
        self.flush()

    def read_meta(self) -> RunMeta:
        """The run's meta (held changes included); keys this version does not know are left
        aside (``engine.run.meta``)."""
        stored = RunMeta()
        if self._has_tables():
            stored = meta_from_rows(self._db.execute("SELECT key, value FROM meta"))
        if not self._held.meta:
            return stored
        return RunMeta.model_validate({**stored.model_dump(), **self._held.meta})

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Flush buffered samples and close; safe to call twice. What the disk still refuses
        is lost then, and logged."""
        if self._db is None:
            return
        if not self.readonly:
            self.flush()
            if not self._held.empty:
                log.error("%s closed with %s unwritten: %s", self.path, self._held.describe(), self.fault)
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
