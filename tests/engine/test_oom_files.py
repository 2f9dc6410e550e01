"""``RUN_DIR/oom/``'s retention: the newest snapshots and breakdowns kept, by time written."""

from __future__ import annotations

import os
from pathlib import Path

from engine.run.oom_files import prune


def written(directory: Path, name: str, mtime_s: int) -> Path:
    path = directory / name
    path.write_bytes(b"x")
    os.utime(path, (mtime_s, mtime_s))
    return path


def test_only_the_newest_are_kept_whatever_their_step(tmp_path: Path) -> None:
    # a later attempt (after a rollback or restart) may run out at an earlier step: time decides
    written(tmp_path, "step-00000090-attempt-1-mb-8.pickle", 100)
    written(tmp_path, "step-00000040-attempt-2-mb-8.pickle", 200)
    written(tmp_path, "step-00000050-attempt-2-mb-8.pickle", 300)
    for t in range(5):
        written(tmp_path, f"step-{t:08d}-attempt-1-mb-8.json", 100 + t)
    gone = prune(tmp_path, snapshots_kept=2, breakdowns_kept=3)
    assert sorted(p.name for p in gone) == [
        "step-00000000-attempt-1-mb-8.json",
        "step-00000001-attempt-1-mb-8.json",
        "step-00000090-attempt-1-mb-8.pickle",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000002-attempt-1-mb-8.json",
        "step-00000003-attempt-1-mb-8.json",
        "step-00000004-attempt-1-mb-8.json",
        "step-00000040-attempt-2-mb-8.pickle",
        "step-00000050-attempt-2-mb-8.pickle",
    ]
