"""Faster verification on resume: a tag verified once (at its seal or a resume) is not hashed
again while its files are unchanged, a tampered one still fails, hashing runs in parallel."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from checkpoint_samples import FIELDS, writer

from engine.checkpoints import manifest as manifest_module
from engine.checkpoints.manifest import MANIFEST_NAME, Manifest, describe_files, verify_tag
from engine.checkpoints.standing import standing_of
from engine.checkpoints.store import CheckpointStore
from engine.checkpoints.verification_record import (
    RECORD_NAME,
    SLACK_NS,
    VerificationRecord,
    settle,
    stamp_of,
)

MODEL = "mp_rank_00_model_states.pt"


def saved_store(directory: Path, steps: tuple[int, ...] = (10, 20)) -> CheckpointStore:
    store = CheckpointStore(directory, keep=5)
    for step in steps:
        outcome = store.save(step, writer(directory, step, size=1 << 16), dict(FIELDS), estimate_bytes=1000)
        assert outcome.status == "saved"
    return store


def resume_verdict(store: CheckpointStore):
    plan, rejected = store.plan_resume(allow_fresh=False)
    assert plan.chosen is not None
    return plan.chosen, rejected


def flip_keeping_times(path: Path) -> None:
    """Invert bytes in the middle, size unchanged, and set the mtime back as it was."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(before.st_size // 2)
        chunk = f.read(64)
        f.seek(before.st_size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_tag_verified_at_its_seal_is_not_hashed_again_on_resume(directory: Path) -> None:
    store = saved_store(directory)
    assert (directory / "global_step20" / RECORD_NAME).is_file()  # the seal's verification
    chosen, rejected = resume_verdict(store)
    assert chosen.tag == "global_step20" and not rejected
    assert chosen.check == "full" and chosen.hashed_bytes == 0
    again, _ = resume_verdict(store)  # and on every later restart
    assert again.hashed_bytes == 0
    # an explicit full check (memtui checkpoints) still reads everything
    assert verify_tag(directory / "global_step20", 20, "full").hashed_bytes == (1 << 16) + 512


@pytest.mark.parametrize("keep_times", [False, True], ids=["plain", "mtime-set-back"])
def test_a_tampered_tag_still_fails_and_the_older_one_is_chosen(directory: Path, keep_times: bool) -> None:
    store = saved_store(directory)
    target = directory / "global_step20" / MODEL
    if keep_times:
        flip_keeping_times(target)
    else:
        target.write_bytes(bytes(b ^ 0xFF for b in target.read_bytes()))
    chosen, rejected = resume_verdict(store)
    assert [v.tag for v in rejected] == ["global_step20"]
    assert f"checksum mismatch in {MODEL}" in (rejected[0].problem or "")
    assert rejected[0].hashed_bytes == 1 << 16  # only the changed file was read
    assert chosen.tag == "global_step10" and chosen.hashed_bytes == 0


def test_only_changed_files_are_hashed_and_then_recorded(directory: Path) -> None:
    store = saved_store(directory, (10,))
    tag = directory / "global_step10"
    model = tag / MODEL
    model.write_bytes(model.read_bytes())  # rewritten with the same bytes: figures change
    verdict = verify_tag(tag, 10, "full", record="update")
    assert verdict.ok and verdict.hashed_bytes == 1 << 16
    chosen, _ = resume_verdict(store)
    assert chosen.hashed_bytes == 0  # recorded again


def test_a_record_for_another_manifest_or_torn_vouches_for_nothing(directory: Path) -> None:
    saved_store(directory, (10,))
    tag = directory / "global_step10"
    record = json.loads((tag / RECORD_NAME).read_text())
    (tag / RECORD_NAME).write_text(json.dumps({**record, "manifest_sha256": "0" * 64}))
    assert verify_tag(tag, 10, "full", record="read").hashed_bytes == (1 << 16) + 512
    (tag / RECORD_NAME).write_text('{"format": 1, "files": ')
    verdict = verify_tag(tag, 10, "full", record="update")
    assert verdict.ok and verdict.hashed_bytes == (1 << 16) + 512
    assert verify_tag(tag, 10, "full", record="read").hashed_bytes == 0  # rewritten whole


def test_a_file_changed_just_before_it_was_read_is_not_vouched_for(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    stamp = stamp_of(path)
    racy = VerificationRecord("m", read_at_ns=stamp[2] + SLACK_NS // 2, files={"f": stamp})
    assert not racy.vouches_for("f", stamp)  # a write in the same clock tick would look alike
    settled = VerificationRecord("m", read_at_ns=stamp[2] + SLACK_NS + 1, files={"f": stamp})
    assert settled.vouches_for("f", stamp)
    assert not settled.vouches_for("f", (stamp[0], stamp[1], stamp[2] + 1, stamp[3]))
    read_at = settle([stamp])  # waits out the rest of the slack for a file this fresh
    assert read_at - stamp[2] > SLACK_NS


def test_the_supervisor_standing_reads_the_record_and_never_writes_one(directory: Path) -> None:
    saved_store(directory, (10,))
    tag = directory / "global_step10"
    (tag / RECORD_NAME).unlink()
    standing = standing_of(directory)
    assert standing.step == 10 and not (tag / RECORD_NAME).exists()


def test_files_are_hashed_in_parallel_and_a_bad_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = tmp_path / "global_step5"
    tag.mkdir()
    for n in range(6):
        (tag / f"shard{n}.pt").write_bytes(os.urandom(4096 + n))
    files = describe_files(tag)
    assert sorted(files) == [f"shard{n}.pt" for n in range(6)]
    threads: set[str] = set()
    real_hash = manifest_module.hash_file

    def tracking(path: Path) -> str:
        threads.add(threading.current_thread().name)
        return real_hash(path)

    monkeypatch.setattr(manifest_module, "HASH_WORKERS", 3)
    monkeypatch.setattr(manifest_module, "hash_file", tracking)
    described = describe_files(tag)
    assert described == files and all(name.startswith("sha256") for name in threads)
    (tag / "shard3.pt").write_bytes(os.urandom(4096 + 3))
    manifest = Manifest(tag=tag.name, step=5, samples=0, created_at=0.0, config_hash="c" * 64,
                        micro_batch=1, grad_accum=1, files=files)  # fmt: skip
    (tag / MANIFEST_NAME).write_text(manifest.model_dump_json())
    verdict = verify_tag(tag, 5, "full")
    assert verdict.problem is not None and verdict.problem.startswith("checksum mismatch in shard3.pt")
