"""The store's decisions table: every verdict kept, written in batches, read back in order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.domain import DecisionRecord
from engine.run.storage.store import Store


def record(n: int, directive_id: str | None = None) -> DecisionRecord:
    return DecisionRecord(
        ts=1000.0 + n,
        decision_id=f"abc123-{n}",
        directive_id=directive_id or f"d-{n}",
        source="flood",
        verdict="reject" if n % 2 else "clamp",
        state="rejected" if n % 2 else "pending",
        reasons=[f"reason {n}"],
        patch={} if n % 2 else {"lr_multiplier": 0.85},
        bounds={"lr_multiplier": (0.05, 0.85)},
        policy_revision="abc123def456",
        rate_limited=bool(n % 2),
    )


def test_decisions_are_buffered_then_written_in_one_flush_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with Store(path) as store:
        for n in range(10_000):
            store.add_decision(record(n))
        with Store(path, readonly=True) as reader:
            assert len(reader.decisions()) < 10_000  # not all written yet: batched
        store.flush()
        with Store(path, readonly=True) as reader:
            rows = reader.decisions()
            assert len(rows) == 10_000
    assert [d for _, d in rows] == [record(n) for n in range(10_000)]  # JSON columns round-trip
    ids = [row_id for row_id, _ in rows]
    assert ids == sorted(ids)


def test_decisions_page_and_filter_by_directive(tmp_path: Path) -> None:
    with Store(tmp_path / "t.sqlite") as store:
        for n in range(5):
            store.add_decision(record(n, directive_id="d-x" if n in (1, 3) else None))
        first = store.decisions(limit=2)
        rest = store.decisions(since_id=first[-1][0])
        assert [d.decision_id for _, d in first + rest] == [f"abc123-{n}" for n in range(5)]
        assert [d.ts for _, d in store.decisions(directive_id="d-x")] == [1001.0, 1003.0]


def test_a_store_made_before_the_table_reads_as_no_decisions(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:  # an older store: events and meta, no decisions table
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    with Store(path, readonly=True) as reader:
        assert reader.decisions() == []
    with Store(path) as writer:  # opened by a newer supervisor: the table is added
        writer.add_decision(record(1))
    with Store(path, readonly=True) as reader:
        assert len(reader.decisions()) == 1
