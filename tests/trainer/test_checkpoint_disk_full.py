"""A disk that fills up mid-save, with real DeepSpeed: DeepSpeed's own write fails (half a
file, then ENOSPC; see engine.trainer.chaos.disk_full_injection). Every older checkpoint stays
as it was, nothing half-written is left, and the run goes on to its last step.
"""

from __future__ import annotations

import pytest
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.checkpoints.catalog import committed_tags, latest_tag, staging_tags
from engine.checkpoints.manifest import verify_tag
from engine.trainer.chaos.disk_full_injection import DISK_FULL_ENV

pytestmark = pytest.mark.deepspeed


@pytest.mark.parametrize("background", [True, False])
def test_a_full_disk_keeps_every_older_checkpoint_and_the_run_going(
    monkeypatch: pytest.MonkeyPatch, background: bool
) -> None:
    monkeypatch.setenv(DISK_FULL_ENV, "6")  # saves at 2 and 4 succeed; from 6 on the disk is full
    run = make_run({"name": "full", "steps": 9, "checkpoint": {"every_steps": 2, "background": background}})
    stub = SupervisorStub(run.socket)
    done = run_trainer(run, 1, 120.0)
    stub.close()
    assert done.returncode == 0, done.stdout + done.stderr

    assert [s.step for s in stub.samples] == list(range(1, 10))  # the run went on to the end
    failed = stub.events("checkpoint_failed")
    assert [e.data["step"] for e in failed] == [6, 8, 9]  # the periodic saves and the final one
    assert all(e.severity == "critical" and "disk full" in e.data["reason"] for e in failed)
    assert [s for s, _ in committed_tags(run.checkpoints)] == [2, 4]
    assert latest_tag(run.checkpoints) == "global_step4" and not staging_tags(run.checkpoints)
    assert all(verify_tag(run.checkpoints / f"global_step{s}", s).ok for s in (2, 4))
    finished = stub.events("trainer_finished")
    assert finished and finished[0].data["reason"] == "completed"
