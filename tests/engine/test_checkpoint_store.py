"""The checkpoint store's save transaction and resume choice, with a fake writer (no torch).

The writer stands in for DeepSpeed's save_checkpoint: it fills the staging directory.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from checkpoint_samples import FIELDS, writer

from engine.checkpoints.catalog import committed_tags, latest_tag, list_checkpoints
from engine.checkpoints.manifest import verify_tag
from engine.checkpoints.store import CheckpointStore, newest_verified_step


def save(store: CheckpointStore, step: int, **kw):
    return store.save(
        step, writer(store.directory, step), dict(FIELDS, samples=step * 8), estimate_bytes=1000, **kw
    )


def test_a_save_commits_a_verified_tag_points_latest_and_prunes(directory: Path) -> None:
    store = CheckpointStore(directory, keep=2)
    outcomes = [save(store, step) for step in (10, 20, 30)]
    assert [o.status for o in outcomes] == ["saved"] * 3
    assert outcomes[-1].pruned == ["global_step10"] and outcomes[-1].size_bytes == 4096 + 512
    assert [t for _, t in committed_tags(directory)] == ["global_step20", "global_step30"]
    assert latest_tag(directory) == "global_step30"
    verdict = verify_tag(directory / "global_step30", 30)
    assert verdict.ok and verdict.manifest is not None and verdict.manifest.samples == 240
    assert not list(directory.glob("*.staging")) and not list(directory.glob(".*tmp*"))


def test_milestones_survive_pruning(directory: Path) -> None:
    store = CheckpointStore(directory, keep=1, milestone_every=20)
    for step in (10, 20, 30, 40, 50):
        save(store, step)
    assert [s for s, _ in committed_tags(directory)] == [20, 40, 50]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("flip", "checksum mismatch in mp_rank_00_model_states.pt"),
        ("truncate", "truncated file mp_rank_00_model_states.pt"),
        ("delete", "missing file mp_rank_00_model_states.pt"),
        ("manifest", "half-written: no manifest.json"),
    ],
)
def test_resume_falls_back_past_a_damaged_newest_tag(directory: Path, damage: str, problem: str) -> None:
    store = CheckpointStore(directory, keep=3)
    for step in (10, 20, 30):
        save(store, step)
    target = directory / "global_step30" / "mp_rank_00_model_states.pt"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[100] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        os.truncate(target, 1000)
    elif damage == "delete":
        target.unlink()
    else:
        (directory / "global_step30" / "manifest.json").unlink()
    assert newest_verified_step(directory, "full") == 20
    plan, rejected = store.plan_resume(allow_fresh=False)
    assert plan.action == "resume" and plan.chosen is not None and plan.chosen.step == 20
    assert [(v.tag, v.problem is not None and v.problem.startswith(problem)) for v in rejected] == [
        ("global_step30", True)
    ]
    store.set_aside(rejected, plan)
    assert latest_tag(directory) == "global_step20"
    assert [s for s, _ in committed_tags(directory)] == [10, 20]
    assert len(list((directory / "quarantine").iterdir())) == 1
    # The next save of step 30 commits cleanly.
    assert save(store, 30).status == "saved"


def test_none_verifies_refuses_unless_fresh(directory: Path) -> None:
    store = CheckpointStore(directory)
    save(store, 10)
    os.truncate(directory / "global_step10" / "optim.pt", 3)
    plan, rejected = store.plan_resume(allow_fresh=False)
    assert plan.action == "refuse" and "truncated file optim.pt" in plan.reason
    fresh, rejected = store.plan_resume(allow_fresh=True)
    assert fresh.action == "fresh"
    store.set_aside(rejected, fresh)
    assert latest_tag(directory) is None and not committed_tags(directory)
    assert store.plan_resume(allow_fresh=False)[0].action == "fresh"  # nothing committed any more


def test_a_deleted_tag_behind_latest_is_not_a_silent_fresh_start(directory: Path) -> None:
    store = CheckpointStore(directory)
    save(store, 10)
    shutil.rmtree(directory / "global_step10")
    assert store.plan_resume(allow_fresh=False)[0].action == "refuse"


def test_a_failing_writer_keeps_every_older_checkpoint_and_reports(directory: Path) -> None:
    store = CheckpointStore(directory, keep=2)
    save(store, 10)
    save(store, 20)
    before = {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}

    def full_disk(staging: str) -> None:
        (directory / staging).mkdir()
        (directory / staging / "mp_rank_00_model_states.pt").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    failed = store.save(30, full_disk, dict(FIELDS), estimate_bytes=10)
    assert failed.status == "failed" and "disk full" in failed.reason
    assert {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()} == before
    assert latest_tag(directory) == "global_step20"
    assert save(store, 40).status == "saved"  # and the run goes on saving


def test_too_little_free_space_skips_the_save_before_writing(directory: Path) -> None:
    store = CheckpointStore(directory, keep=2, free_bytes=lambda _p: 5000)
    assert save(store, 10).status == "saved"  # estimate 1000 bytes: fits
    skipped = save(store, 20)  # the newest is 4608 bytes: 5760 with headroom do not fit
    assert skipped.status == "skipped" and skipped.free_bytes == 5000 and skipped.needed_bytes == 5760
    assert "not enough free disk" in skipped.reason
    assert [s for s, _ in committed_tags(directory)] == [10] and latest_tag(directory) == "global_step10"


def test_leftover_staging_is_quarantined_and_listed(directory: Path) -> None:
    store = CheckpointStore(directory)
    save(store, 10)
    (directory / "global_step20.staging").mkdir()
    (directory / "global_step20.staging" / "x.pt").write_bytes(b"half")
    rows = list_checkpoints(directory)
    assert [(r.tag, r.state, r.latest) for r in rows] == [
        ("global_step20.staging", "staging", False),
        ("global_step10", "verified", True),
    ]
    [(name, moved)] = store.quarantine_staging()
    assert name == "global_step20.staging" and not (directory / name).exists()
    assert (directory / "quarantine" / moved / "x.pt").read_bytes() == b"half"  # kept as evidence
