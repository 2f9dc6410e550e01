"""Storage faults: which errors are one, and what the store does while the disk refuses
writes (a real SQLite file made full with ``PRAGMA max_page_count``)."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from engine.domain import TelemetrySample
from engine.run import durable_file, ownership
from engine.run.directory import RunDir
from engine.run.storage.storage_fault import is_storage_fault, storage_fault
from engine.run.storage.store import Store
from engine.supervisor import daemon
from tests.fakes.fake_trainer import sample as fake_sample


def sqlite_error(kind: type[sqlite3.Error], text: str, code: int | None, name: str = "") -> sqlite3.Error:
    err = kind(text)
    if code is not None:  # as Python 3.11+ raises them; 3.10 gives the text only
        err.sqlite_errorcode = code  # type: ignore[attr-defined]
        err.sqlite_errorname = name  # type: ignore[attr-defined]
    return err


@pytest.mark.parametrize(
    "err",
    [
        sqlite_error(sqlite3.OperationalError, "database or disk is full", 13, "SQLITE_FULL"),
        sqlite_error(sqlite3.OperationalError, "database or disk is full", None),
        sqlite_error(sqlite3.OperationalError, "disk I/O error", 10, "SQLITE_IOERR"),
        sqlite_error(sqlite3.OperationalError, "disk I/O error", 778, "SQLITE_IOERR_WRITE"),
        sqlite_error(sqlite3.DatabaseError, "disk I/O error", 4874, "SQLITE_IOERR_SHMSIZE"),
        sqlite_error(sqlite3.OperationalError, "disk I/O error", None),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        OSError(errno.EFBIG, "File too large"),
        OSError(errno.EIO, "Input/output error"),
    ],
    ids=repr,
)
def test_full_and_failing_disks_are_storage_faults(err: BaseException) -> None:
    assert is_storage_fault(err)
    reason = storage_fault(err)
    assert reason is not None and str(err.args[-1]) in reason


@pytest.mark.parametrize(
    "err",
    [
        sqlite_error(sqlite3.OperationalError, "database is locked", 5, "SQLITE_BUSY"),
        sqlite_error(sqlite3.OperationalError, "database is locked", None),
        sqlite_error(sqlite3.DatabaseError, "database disk image is malformed", 11, "SQLITE_CORRUPT"),
        sqlite_error(sqlite3.OperationalError, "attempt to write a readonly database", 8, "SQLITE_READONLY"),
        sqlite_error(
            sqlite3.IntegrityError, "UNIQUE constraint failed: events.seq", 1555, "SQLITE_CONSTRAINT"
        ),
        sqlite_error(sqlite3.OperationalError, "no such table: steps", 1, "SQLITE_ERROR"),
        OSError(errno.EACCES, "Permission denied"),
        OSError(errno.ENOENT, "No such file or directory"),
        OSError("no errno at all"),
        ValueError("a bug"),
    ],
    ids=repr,
)
def test_other_errors_are_not(err: BaseException) -> None:
    assert storage_fault(err) is None and not is_storage_fault(err)


def test_a_real_full_database_is_a_storage_fault(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "full.sqlite", isolation_level=None)
    db.execute("CREATE TABLE t (x TEXT)")
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError) as caught:
        db.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 100)
    assert "database or disk is full" in (storage_fault(caught.value) or "")


# ----------------------------------------------------------------- the store itself


def sample(step: int) -> TelemetrySample:
    return fake_sample(step, 1, None).model_copy(update={"ts": float(step)})


def fill(store: Store) -> None:
    """The file may not grow by one more page: SQLite answers SQLITE_FULL, as on a full disk."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")


def make_room(store: Store) -> None:
    store._db.execute("PRAGMA max_page_count = 1073741823")


def test_a_full_store_holds_everything_in_order_and_writes_it_when_room_returns(tmp_path: Path) -> None:
    faults: list[str] = []
    store = Store(tmp_path / "telemetry.sqlite", batch_rows=8)
    store.on_fault = faults.append
    store.append_event("before", message="stored at once")
    store.update_meta(state="running", attempt=1)
    fill(store)
    for step in range(1, 201):  # batches of 8: the first that needs a page is refused
        store.add_step(sample(step))
    assert store.fault is not None and "full" in store.fault and len(faults) == 1
    held = store.append_event("alert", severity="critical", message="the store cannot write")
    store.update_meta(state="paused")
    assert held.seq == 2  # numbered now, as it will be stored
    assert store.last_seq() == 2 and [e.seq for e in store.events_since(0)] == [1, 2]
    assert store.read_meta().state == "paused" and store.latest_step() == sample(200)
    assert store.flush() == 0 and not store.retry()  # still full: nothing tried twice, nothing lost
    assert len(faults) == 1  # told once per fault

    make_room(store)
    assert store.retry() and store.fault is None
    after = store.append_event("resolved")
    assert after.seq == 3
    store.close()
    with Store(tmp_path / "telemetry.sqlite", readonly=True) as reader:
        assert [s.step for s in reader.steps()] == list(range(1, 201))
        assert [(e.seq, e.type) for e in reader.events_since(0)] == [
            (1, "before"),
            (2, "alert"),
            (3, "resolved"),
        ]
        assert reader.read_meta().state == "paused"


def test_the_backlog_is_bounded_and_says_what_it_dropped(tmp_path: Path) -> None:
    store = Store(tmp_path / "telemetry.sqlite", batch_rows=4, held_rows=10)
    fill(store)
    for _ in range(2):  # the root page takes one, the second needs a page: refused
        store.append_event("big", message="x" * 4000)
    for step in range(1, 31):
        store.add_step(sample(step))
    assert store.fault is not None and len(store.held.steps) == 10
    assert store.held.take_dropped() == "20 step samples (steps 11..30)"
    make_room(store)
    assert store.retry()
    assert [s.step for s in store.steps()] == list(range(1, 11))


def test_a_store_reopened_on_a_full_disk_writes_nothing_to_open(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.sqlite"
    Store(path).close()
    before = path.stat().st_mtime_ns, (tmp_path / "telemetry.sqlite-wal").exists()
    Store(path).close()
    assert (path.stat().st_mtime_ns, (tmp_path / "telemetry.sqlite-wal").exists()) == before


# ------------------------------------------------------------- the run's other files


def test_an_atomic_replace_refused_by_the_disk_keeps_the_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "supervisor.pid"
    target.write_text("123\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(durable_file.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        durable_file.replace_atomically(target, b"456\n")
    assert target.read_text() == "123\n" and [p.name for p in tmp_path.iterdir()] == ["supervisor.pid"]


async def test_a_supervisor_that_cannot_write_its_pid_file_says_so(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ownership, "replace_atomically", full)
    with pytest.raises(
        daemon.SupervisorError, match=r"cannot write .*supervisor.pid: No space left on device"
    ):
        await daemon.Supervisor(run, ["true"]).serve()
    monkeypatch.undo()
    ownership.Ownership.take(run).release()  # the lock was let go: the next supervisor may take the run
