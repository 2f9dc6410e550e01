"""memory.json between trainer attempts: the micro-batch and the controller's history come
back as written; a malformed file is ignored whole (the attempt starts as configured); the
OOM's reason is there only when an OOM wrote it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.memory.controller import Geometry
from engine.memory.size_history import SizeHistory
from engine.trainer.memory.geometry_file import read_geometry, write_geometry

ALLOWED = (1, 2, 4, 8, 16)
HISTORY = SizeHistory({8: (100.0, 101.0, 99.0)}, {16: (12, 4_000_000)})


def test_what_one_attempt_writes_the_next_reads(tmp_path: Path) -> None:
    path = tmp_path / "memory.json"
    write_geometry(path, Geometry(8, 4), HISTORY, None)
    left = read_geometry(path, ALLOWED)
    assert left is not None and left.micro_batch == 8 and left.history == HISTORY
    assert "reason" not in json.loads(path.read_text())  # a routine save: no OOM to report
    write_geometry(path, Geometry(4, 8), HISTORY, "OOM in step 12")
    assert json.loads(path.read_text())["reason"] == "OOM in step 12"


def test_an_older_trainers_file_has_no_history(tmp_path: Path) -> None:
    path = tmp_path / "memory.json"
    path.write_text('{"micro_batch": 4, "grad_accum": 8, "reason": "OOM in step 3"}')
    left = read_geometry(path, ALLOWED)
    assert left is not None and left.micro_batch == 4 and left.history is None


@pytest.mark.parametrize(
    "text",
    ["", "[]", '{"grad_accum": 2}', '{"micro_batch": "x"}', '{"micro_batch": 4, "history": {"rates": []}}'],
)
def test_a_malformed_file_is_ignored_whole(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "memory.json"
    path.write_text(text)
    assert read_geometry(path, ALLOWED) is None
    assert "ignoring" in caplog.text


def test_no_file_no_geometry(tmp_path: Path) -> None:
    assert read_geometry(tmp_path / "memory.json", ALLOWED) is None
    assert read_geometry(None, ALLOWED) is None
