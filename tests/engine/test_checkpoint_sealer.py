"""Sealing a checkpoint on a background thread (engine.checkpoints.sealer), with a fake writer.

The store's two halves: ``stage`` (the write training waits for) and ``seal`` (fsync,
manifest, rename, verify, latest, prune), which the sealer runs while training goes on.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from checkpoint_samples import FIELDS, writer

from engine.checkpoints.catalog import committed_tags, latest_tag, staging_tags
from engine.checkpoints.sealer import CheckpointSealer
from engine.checkpoints.store import CheckpointStore, SaveOutcome, Staged


def stage(store: CheckpointStore, step: int) -> Staged:
    staged = store.stage(step, writer(store.directory, step), estimate_bytes=1000)
    assert isinstance(staged, Staged)
    return staged


def test_the_seal_commits_in_the_background_while_the_caller_goes_on(directory: Path) -> None:
    store, sealer, gate = CheckpointStore(directory, keep=2), CheckpointSealer(), threading.Event()
    store.save(10, writer(directory, 10), dict(FIELDS), estimate_bytes=1000)
    staged = stage(store, 20)

    def gated_seal() -> SaveOutcome:
        gate.wait(10)
        return store.seal(staged, dict(FIELDS, samples=160))

    sealer.submit(gated_seal)
    # Training goes on: nothing is committed yet, and a resume now would take step 10.
    assert sealer.busy and sealer.poll() is None
    assert latest_tag(directory) == "global_step10"
    assert staging_tags(directory) == [(20, "global_step20.staging")]
    assert store.plan_resume(False)[0].chosen.step == 10
    gate.set()
    outcome, _waited = sealer.wait()
    assert outcome is not None and outcome.status == "saved" and outcome.step == 20
    assert outcome.seconds == pytest.approx(outcome.write_s + outcome.seal_s)
    assert latest_tag(directory) == "global_step20" and not staging_tags(directory)
    assert not sealer.busy and sealer.poll() is None  # collected once
    assert sealer.close() is None


def test_poll_hands_over_a_finished_seal_once(directory: Path) -> None:
    store, sealer = CheckpointStore(directory), CheckpointSealer()
    staged = stage(store, 5)
    sealer.submit(lambda: store.seal(staged, dict(FIELDS)))
    outcomes = []
    for _ in range(1000):
        if (outcome := sealer.poll()) is not None:
            outcomes.append(outcome)
        if outcomes and not sealer.busy:
            break
        threading.Event().wait(0.01)
    assert [o.status for o in outcomes] == ["saved"] and sealer.poll() is None
    sealer.close()


def test_one_seal_at_a_time(directory: Path) -> None:
    store, sealer, gate = CheckpointStore(directory), CheckpointSealer(), threading.Event()
    staged = stage(store, 5)
    sealer.submit(lambda: (gate.wait(10), store.seal(staged, dict(FIELDS)))[1])
    with pytest.raises(RuntimeError, match="still being sealed"):
        sealer.submit(lambda: store.seal(staged, dict(FIELDS)))
    gate.set()
    assert sealer.close() is not None  # close waits for it and hands its outcome over


def test_a_crash_before_the_seal_ends_resumes_from_the_previous_checkpoint(directory: Path) -> None:
    store = CheckpointStore(directory)
    store.save(10, writer(directory, 10), dict(FIELDS), estimate_bytes=1000)
    stage(store, 20)  # written, never sealed: the process died here
    after_crash = CheckpointStore(directory)
    [(name, moved)] = after_crash.quarantine_staging()
    assert name == "global_step20.staging" and (directory / "quarantine" / moved).is_dir()
    plan, rejected = after_crash.plan_resume(False)
    assert plan.chosen is not None and plan.chosen.step == 10 and rejected == []
    assert [s for s, _ in committed_tags(directory)] == [10]


def test_a_failing_seal_is_an_outcome_and_keeps_the_older_checkpoints(directory: Path) -> None:
    store, sealer = CheckpointStore(directory), CheckpointSealer()
    store.save(10, writer(directory, 10), dict(FIELDS), estimate_bytes=1000)
    staged = stage(store, 20)
    shutil.rmtree(directory / staged.staging)  # the files vanish under the seal (a bad disk)
    sealer.submit(lambda: store.seal(staged, dict(FIELDS)))
    outcome, _ = sealer.wait()
    assert outcome is not None and outcome.status == "failed" and "sealing failed" in outcome.reason
    assert latest_tag(directory) == "global_step10" and [s for s, _ in committed_tags(directory)] == [10]
    sealer.close()
