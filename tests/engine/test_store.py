"""The SQLite store: numbered events, every step kept, read-only views, WAL."""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import pytest

from engine.domain import RankMemory, TelemetrySample
from engine.run.meta import MetaError, RunMeta
from engine.run.storage.store import SCHEMA_VERSION, Store, StoreError


def sample(step: int, *, attempt: int = 1, loss: float = 1.0, **over: object) -> TelemetrySample:
    fields: dict[str, object] = dict(
        step=step,
        ts=time.time(),
        attempt=attempt,
        samples=8 * step,
        tokens=1024 * step,
        loss=loss,
        lr=1e-3,
        step_time_s=0.01,
        tokens_per_s=1e5,
        micro_batch=8,
        grad_accum=1,
    )
    fields.update(over)
    return TelemetrySample.model_validate(fields)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "t.sqlite")
    yield s
    s.close()


def test_wal_mode_and_schema_version(store: Store) -> None:
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_events_are_numbered_without_gaps(store: Store) -> None:
    events = [store.append_event("tick", data={"i": i}, attempt=1 if i % 2 else None) for i in range(50)]
    assert [e.seq for e in events] == list(range(1, 51))
    assert store.last_seq() == 50
    stored = store.events_since(0)
    assert stored == events
    assert [e.data["i"] for e in stored] == list(range(50))


def test_events_since_and_limit(store: Store) -> None:
    for i in range(10):
        store.append_event("tick", message=f"m{i}", severity="warning")
    assert [e.seq for e in store.events_since(7)] == [8, 9, 10]
    assert [e.seq for e in store.events_since(2, limit=3)] == [3, 4, 5]
    assert store.events_since(10) == []
    assert store.events_since(3, limit=1)[0].severity == "warning"


def test_event_is_durable_when_returned(store: Store, tmp_path: Path) -> None:
    event = store.append_event("run_started", message="hello")
    with Store(tmp_path / "t.sqlite", readonly=True) as reader:
        assert reader.events_since(0) == [event]


def test_steps_round_trip_with_nan_and_none(store: Store) -> None:
    samples = [
        sample(1, loss=float("nan"), grad_norm=None, loss_scale=None),
        sample(
            2, loss=float("inf"), grad_norm=float("nan"), loss_scale=1024.0, overflow=True, mem_kind="cuda"
        ),
        sample(3, loss=2.0, grad_norm=0.5),
    ]
    for s in samples:
        store.add_step(s)
    store.flush()
    back = store.steps()
    assert len(back) == 3
    assert math.isnan(back[0].loss) and back[0].grad_norm is None and back[0].loss_scale is None
    assert back[1].loss == float("inf") and math.isnan(back[1].grad_norm)  # type: ignore[arg-type]
    assert back[1].overflow is True and back[1].mem_kind == "cuda"
    assert back[2] == samples[2]


def test_per_rank_memory_round_trips_as_json(store: Store) -> None:
    ranks = [
        RankMemory(rank=r, allocated=10 + r, reserved=20 + r, peak=30 + r, capacity=1 << 40) for r in (0, 1)
    ]
    store.add_step(sample(1, world_size=2, ranks=ranks))
    store.add_step(sample(2, world_size=2))  # not a reporting step: no ranks
    back = store.steps()
    assert back[0].ranks == ranks and back[1].ranks is None
    assert store.latest_step() == back[1]


def test_repeated_steps_from_attempts_are_all_kept(store: Store) -> None:
    for step in range(1, 6):
        store.add_step(sample(step, attempt=1))
    for step in range(3, 8):  # resumed from a checkpoint at step 2
        store.add_step(sample(step, attempt=2))
    back = store.steps()
    assert [(s.attempt, s.step) for s in back] == [(1, i) for i in range(1, 6)] + [
        (2, i) for i in range(3, 8)
    ]
    assert [s.step for s in store.steps(since_step=5)] == [6, 7]
    assert [s.step for s in store.steps(since_step=0, limit=2)] == [1, 2]
    latest = store.latest_step()
    assert latest is not None and (latest.attempt, latest.step) == (2, 7)


def test_iter_steps_pages_by_row_not_by_step_number(store: Store) -> None:
    """Export reads every row: a page edge inside a resumed attempt's repeat loses none."""
    for step in range(1, 6):
        store.add_step(sample(step, attempt=1))
    for step in range(3, 8):
        store.add_step(sample(step, attempt=2))
    for page_rows in (1, 2, 3, 5, 10, 100):
        rows = [(s.attempt, s.step) for s in store.iter_steps(page_rows)]
        assert rows == [(1, i) for i in range(1, 6)] + [(2, i) for i in range(3, 8)], page_rows


def test_steps_are_batched_until_flush(tmp_path: Path) -> None:
    writer = Store(tmp_path / "b.sqlite", batch_rows=4)
    reader = Store(tmp_path / "b.sqlite", readonly=True)
    try:
        for step in range(1, 4):
            writer.add_step(sample(step))
        assert reader.steps() == []  # buffered, not yet written
        assert writer.latest_step().step == 3  # type: ignore[union-attr]
        writer.add_step(sample(4))  # a full batch writes itself
        assert [s.step for s in reader.steps()] == [1, 2, 3, 4]
        writer.add_step(sample(5))
        assert writer.flush() == 1
        assert [s.step for s in reader.steps(since_step=3)] == [4, 5]
        assert reader.latest_step().step == 5  # type: ignore[union-attr]
    finally:
        writer.close()
        reader.close()


def test_meta_is_typed_and_refuses_unknown_keys_and_wrong_types(store: Store) -> None:
    assert store.read_meta() == RunMeta()
    store.update_meta(state="running")
    store.update_meta(attempt=2, exit_reason=None, started_at=12.5)
    store.update_meta(state="stopped")
    assert store.read_meta() == RunMeta(state="stopped", attempt=2, started_at=12.5)
    with pytest.raises(MetaError, match="unknown meta key.*nested"):
        store.update_meta(state="running", nested={"a": [1]})
    with pytest.raises(MetaError, match="state"):
        store.update_meta(state="sleeping")
    with pytest.raises(MetaError, match="attempt"):
        store.update_meta(attempt="second")
    assert store.read_meta().state == "stopped"  # a refused write writes nothing


def test_meta_written_by_other_code_still_reads(store: Store) -> None:
    """Keys this version does not know, and a value that does not validate, are left aside."""
    rows = {"state": '"completed"', "restarts": "3", "legacy_key": '{"a": [1]}', "hold": '"maybe"'}
    store._db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", list(rows.items()))
    assert store.read_meta() == RunMeta(state="completed", restarts=3)


def test_readonly_store_cannot_write(store: Store, tmp_path: Path) -> None:
    store.update_meta(state="running")
    store.add_step(sample(1))
    store.flush()
    with Store(tmp_path / "t.sqlite", readonly=True) as reader:
        assert reader.read_meta().state == "running" and len(reader.steps()) == 1
        with pytest.raises(StoreError):
            reader.append_event("tick")
        with pytest.raises(StoreError):
            reader.update_meta(state="stopped")
        with pytest.raises(StoreError):
            reader.add_step(sample(2))
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader._db.execute("INSERT INTO meta VALUES ('k', '1')")


def test_readonly_store_of_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such store"):
        Store(tmp_path / "missing.sqlite", readonly=True)
    assert not (tmp_path / "missing.sqlite").exists()


def test_readonly_store_before_the_schema_exists(tmp_path: Path) -> None:
    (tmp_path / "empty.sqlite").touch()  # the supervisor has just created the file
    with Store(tmp_path / "empty.sqlite", readonly=True) as reader:
        assert reader.read_meta() == RunMeta() and reader.last_seq() == 0
        assert reader.steps() == [] and reader.latest_step() is None and reader.events_since(0) == []


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "new.sqlite")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer"):
        Store(tmp_path / "new.sqlite")


def test_reopen_keeps_numbering(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as first:
        first.append_event("a")
        first.add_step(sample(1))  # close flushes
    with Store(tmp_path / "r.sqlite") as second:
        assert second.append_event("b").seq == 2
        assert len(second.steps()) == 1
