"""A run stored by the code before the layout change still opens: status, meta, every
event's typed payload, the console's history view, the CLI (``tests/fixtures/store_v1``)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.events import PAYLOADS, CheckpointSaved, TrainerRestarted, payload_of
from engine.run.directory import RunDir
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store
from memtui.console.history_view import stored_view

FIXTURE = Path(__file__).parent / "fixtures" / "store_v1"
RUN_ID = (FIXTURE / "RUN_ID").read_text().strip()


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtc")


@pytest.fixture
def run(home: Path) -> RunDir:
    """A copy of the stored run in a throwaway home (the fixture itself stays untouched)."""
    path = home / "runs" / RUN_ID
    path.mkdir(parents=True)
    for name in ("run.json", "telemetry.sqlite"):
        shutil.copy(FIXTURE / name, path / name)
    run = RunDir(path)
    run.ensure_layout()
    return run


def test_status_and_meta_read_back(run: RunDir) -> None:
    status = offline_status(run)
    assert (status.state, status.step, status.restarts, status.attempt) == ("stopped", 820, 1, 2)
    assert status.exit_reason == "on request (memtui stop)"
    with Store(run.store, readonly=True) as store:
        meta = store.read_meta()
        assert meta.state == "stopped" and meta.restarts == 1 and meta.hold is False
        assert store.latest_step() is not None and store.count_steps() > 800


def test_every_stored_event_has_a_known_type_and_its_payload_parses(run: RunDir) -> None:
    with Store(run.store, readonly=True) as store:
        events = store.events_since(0)
    assert len(events) > 40
    unknown = sorted({e.type for e in events} - set(PAYLOADS))
    assert unknown == []
    unreadable = [(e.seq, e.type) for e in events if payload_of(e) is None]
    assert unreadable == []
    restarted = [p for e in events if (p := TrainerRestarted.of(e)) is not None]
    assert len(restarted) == 1 and restarted[0].resume_step > 0
    assert sum(CheckpointSaved.of(e) is not None for e in events) >= 10


def test_the_console_opens_it_as_history(run: RunDir) -> None:
    view = stored_view(run)
    assert view.connection == "history" and view.state == "stopped"
    assert view.step == 820 and view.restarts == 1
    assert view.last_save is not None and view.thresholds.memory_warn == 0.85


def test_a_writer_opens_it_and_it_reads_the_same(run: RunDir) -> None:
    with Store(run.store) as store:  # the supervisor of `memtui resume` opens it read-write
        store.update_meta(hold=False)
    assert offline_status(run).step == 820


@pytest.mark.slow
def test_the_cli_reads_it(run: RunDir, home: Path) -> None:
    status = memtui(home, "status", RUN_ID, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "stopped"
    directives = memtui(home, "directives", RUN_ID, "--json")
    assert directives.returncode == 0, directives.stderr
    assert [d["state"] for d in json.loads(directives.stdout)] == ["applied"]
    exported = memtui(home, "export", RUN_ID, "--format", "jsonl", "--what", "events")
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) > 40
