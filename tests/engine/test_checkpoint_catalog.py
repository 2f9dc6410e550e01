"""What ``memtui checkpoints`` lists: a tag is "verified" only when its manifest, its sizes
and its hashes were read and it was still there afterwards; a tag being pruned, a staging
dir, a half-written tag and an unreadable size are each shown as what they are. Also the
bounded quarantine of half-written staging dirs. No torch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from checkpoint_samples import FIELDS, writer

import engine.checkpoints.catalog
import engine.checkpoints.store
from engine.checkpoints.catalog import (
    QUARANTINED_STAGING_KEPT,
    committed_tags,
    list_checkpoints,
    pruning_tags,
    quarantined_staging,
)
from engine.checkpoints.manifest import MANIFEST_NAME, verify_tag
from engine.checkpoints.store import CheckpointStore
from engine.checkpoints.verification_record import RECORD_NAME


def save(store: CheckpointStore, step: int):
    return store.save(step, writer(store.directory, step), dict(FIELDS, samples=step), estimate_bytes=1000)


def states(directory: Path) -> list[tuple[str, str]]:
    return [(r.tag, r.state) for r in list_checkpoints(directory)]


def test_each_kind_of_tag_dir_is_listed_as_what_it_is(directory: Path) -> None:
    store = CheckpointStore(directory, keep=5)
    for step in (10, 20, 30, 40):
        save(store, step)
    (directory / "global_step10" / MANIFEST_NAME).unlink()  # half-written: no manifest
    (directory / "global_step20" / "dangling.pt").symlink_to(directory / "nowhere")  # size unreadable
    os.rename(directory / "global_step30", directory / "global_step30.pruning")  # being deleted
    (directory / "global_step50.staging").mkdir()  # a save in flight
    (directory / "global_step50.staging" / "part.pt").write_bytes(b"x" * 100)

    rows = {r.tag: r for r in list_checkpoints(directory)}
    assert [(tag, rows[tag].state) for tag in rows] == [
        ("global_step50.staging", "staging"),
        ("global_step40", "verified"),
        ("global_step30.pruning", "pruning"),
        ("global_step20", "unreadable"),
        ("global_step10", "half-written"),
    ]
    assert "dangling.pt" in (rows["global_step20"].problem or "")
    pruning = directory / "global_step30.pruning"
    extras = [MANIFEST_NAME, RECORD_NAME]  # the manifest and the seal's verification record
    assert rows["global_step30.pruning"].size_bytes == 4096 + 512 + sum(
        len((pruning / name).read_bytes()) for name in extras
    )
    assert rows["global_step50.staging"].size_bytes == 100 and not rows["global_step50.staging"].latest
    assert rows["global_step40"].latest and rows["global_step40"].mtime > 0


@pytest.mark.parametrize("how", ["renamed for pruning", "deleted"])
def test_a_tag_that_vanishes_while_it_is_checked_is_never_listed_verified(
    directory: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The race seen on a live run: the tag verified, then the sealer pruned it before its
    size and age were read (it was listed as ``0 B, 20787d ago, verified``)."""
    store = CheckpointStore(directory, keep=5)
    save(store, 10)
    save(store, 20)

    def verify_then_prune(path: Path, step: int, check: str = "full"):
        verdict = verify_tag(path, step, check)  # type: ignore[arg-type]
        if step == 10:
            if how == "deleted":
                shutil.rmtree(path)
            else:
                os.rename(path, directory / "global_step10.pruning")
        return verdict

    monkeypatch.setattr(engine.checkpoints.catalog, "verify_tag", verify_then_prune)
    listed = states(directory)
    assert ("global_step10", "verified") not in listed
    expected = [("global_step20", "verified")]
    if how != "deleted":
        expected.append(("global_step10.pruning", "pruning"))
    assert listed == expected
    assert all(r.mtime > 0 for r in list_checkpoints(directory))


def test_pruning_renames_a_tag_out_of_the_committed_names_before_deleting_it(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(directory, keep=2)
    deleted: list[str] = []
    real_rmtree = shutil.rmtree

    def rmtree(path: Path, *args: object, **kwargs: object) -> None:
        if Path(path).exists():
            deleted.append(Path(path).name)
        real_rmtree(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.checkpoints.store.shutil, "rmtree", rmtree)
    outcomes = [save(store, step) for step in (10, 20, 30)]
    assert outcomes[-1].pruned == ["global_step10"]
    assert deleted == ["global_step10.pruning"]  # never a committed name
    assert [s for s, _ in committed_tags(directory)] == [20, 30] and not pruning_tags(directory)


def test_a_deletion_a_crash_cut_short_is_finished_by_the_next_save(directory: Path) -> None:
    store = CheckpointStore(directory, keep=2)
    save(store, 10)
    os.rename(directory / "global_step10", directory / "global_step10.pruning")  # then the crash
    assert states(directory) == [("global_step10.pruning", "pruning")]
    save(store, 20)
    assert states(directory) == [("global_step20", "verified")]


def test_half_written_staging_dirs_are_quarantined_the_newest_few_kept(directory: Path) -> None:
    store = CheckpointStore(directory)
    save(store, 10)
    for step in (20, 30, 40):  # three crashes mid-save, each followed by a resume
        (directory / f"global_step{step}.staging").mkdir()
        (directory / f"global_step{step}.staging" / "part.pt").write_bytes(b"half")
        [(name, moved)] = store.quarantine_staging()
        assert name == f"global_step{step}.staging" and moved.startswith(name)
    kept = [p.name.split("-")[0] for p in quarantined_staging(directory)]
    assert kept == ["global_step30.staging", "global_step40.staging"][-QUARANTINED_STAGING_KEPT:]
    assert states(directory) == [("global_step10", "verified")]


def test_quarantined_staging_dirs_give_way_before_a_save_is_skipped_for_room(directory: Path) -> None:
    """Evidence of a crash is worth less than the next checkpoint."""

    def free_bytes(_path: Path) -> int:  # the quarantined staging dir is what fills the disk
        return 100 if quarantined_staging(directory) else 1 << 30

    store = CheckpointStore(directory, free_bytes=free_bytes)
    save(store, 10)
    (directory / "global_step20.staging").mkdir()
    (directory / "global_step20.staging" / "part.pt").write_bytes(b"half")
    store.quarantine_staging()
    assert quarantined_staging(directory)
    assert save(store, 30).status == "saved"
    assert not quarantined_staging(directory)
    assert (directory / "quarantine").is_dir()  # the quarantine itself stays
