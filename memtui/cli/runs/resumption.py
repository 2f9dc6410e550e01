"""``memtui resume [RUN] [--fresh]``: start a run again whose process tree is gone (a reboot,
``kill -9`` of the supervisor), in the same run directory with its history.

Checks first, so that the answer is immediate: no live supervisor (a live one is
``AlreadyServed``: the run goes on, nothing to start), no old trainer still writing, and a
checkpoint that verifies (or none ever committed, or ``--fresh``). The supervisor then
starts and its trainer resumes from the newest verified checkpoint. When several resumes
race past the checks, one supervisor takes the run and the others leave at once: their
callers get ``AlreadyServed`` naming the one that serves it, as a later resume would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from engine.checkpoints.catalog import committed_before, committed_tags, verdicts_newest_first
from engine.checkpoints.selection import plan_resume, select_newest_verified
from engine.run.directory import RunDir, pid_alive
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store

OLD_TRAINER_WAIT_S = 30.0  # an orphaned trainer checkpoints and exits when its supervisor is gone


class ResumeRefused(RuntimeError):
    """The run cannot be resumed; the message says why and what to do."""


@dataclass(frozen=True)
class ResumeCheck:
    """What a resume will do: from which step, and which newer tags it will skip."""

    from_step: int | None
    """None: step 0 (fresh start)."""
    skipped: list[str]


def check_resumable(run: RunDir, fresh: bool) -> ResumeCheck:
    """Raise ResumeRefused unless ``run`` can be started again now, or AlreadyServed when a
    supervisor serves it already (the same answer a resume that lost a race gets)."""
    from engine.run.launch import AlreadyServed

    pid = run.supervisor_pid()
    if pid is not None:
        raise AlreadyServed(run, pid)
    _refuse_a_damaged_or_lost_history(run)
    status = offline_status(run)
    if status.state == "completed":
        raise ResumeRefused(f"{run.run_id} completed at step {status.step}; nothing to resume")
    _wait_for_old_trainer(run)
    selection = select_newest_verified(verdicts_newest_first(run.checkpoints, "full"))
    plan = plan_resume(selection, committed_before(run.checkpoints), fresh)
    if plan.action == "refuse":
        raise ResumeRefused(plan.reason)
    skipped = [f"{v.tag}: {v.problem}" for v in selection.rejected]
    return ResumeCheck(plan.chosen.step if plan.chosen else None, skipped)


def _refuse_a_damaged_or_lost_history(run: RunDir) -> None:
    """A store SQLite cannot read, or one with no history beside committed checkpoints (a
    store emptied or replaced), is refused before a supervisor would start a new history
    over the run's: StoreError (damaged) or ResumeRefused (empty), naming what still can be done."""
    from engine.run.storage.store import StoreError

    if not run.store.exists():
        return
    checkpoints = "`memtui checkpoints RUN` lists the checkpoints that verify"
    with Store(run.store, readonly=True) as store:
        damage = store.damage()
        if damage is not None:
            raise StoreError(f"{run.run_id}: cannot resume: its store is damaged ({damage}); {checkpoints}")
        history = store.count_steps()
    saved = committed_tags(run.checkpoints)
    if history == 0 and saved:
        raise ResumeRefused(
            f"its store holds no step, yet {len(saved)} checkpoint(s) were committed: its history "
            f"is lost, and a resume would start an empty one over it. To do that knowingly, "
            f"move {run.store.name} aside first"
        )


def resume_run(run: RunDir, fresh: bool, ranks: int | None = None) -> tuple[int, ResumeCheck]:
    """Check, start the supervisor again and wait until it serves: (its pid, the plan).
    ``ranks``: resume at this many ranks (the trainer converts a ZeRO checkpoint written by
    another number). Raises ResumeRefused, AlreadyServed if another supervisor took the run
    meanwhile (a concurrent resume), or LaunchError if it did not come up."""
    from engine.run.launch import spawn_supervisor, wait_until_serving

    plan = check_resumable(run, fresh=fresh)
    if ranks is not None:
        change_ranks(run, ranks)
    pid = spawn_supervisor(run, extra_args=["--fresh"] if fresh else [])
    wait_until_serving(run, pid)
    return pid, plan


def change_ranks(run: RunDir, ranks: int) -> None:
    """Rewrite ``run.json`` with ``train.ranks = ranks`` (validated like any config: the
    global batch must still divide), keeping everything else."""
    from pydantic import ValidationError

    from engine.config.config_file import ConfigError, describe_validation
    from engine.config.run_config import RunConfig

    try:
        config = run.read_config()
    except ConfigError as err:
        raise ResumeRefused(str(err)) from None
    if config.train.ranks == ranks:
        return
    raw = config.model_dump(mode="json")
    raw["train"]["ranks"] = ranks
    try:
        changed = RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ResumeRefused(f"--ranks {ranks}: {describe_validation(err)}") from None
    run.write_config(changed, created_at=run.created_at())


def _wait_for_old_trainer(run: RunDir) -> None:
    """Two trainers must never write one run: wait for an orphan to finish its last save."""
    try:
        with Store(run.store, readonly=True) as store:
            pid = store.read_meta().trainer_pid
    except Exception:
        return
    if not pid:
        return
    deadline = time.monotonic() + OLD_TRAINER_WAIT_S
    while _is_trainer(pid):
        if time.monotonic() >= deadline:
            raise ResumeRefused(f"the run's old trainer (pid {pid}) is still running; stop it first")
        time.sleep(0.2)


def _is_trainer(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"engine.trainer" in f.read()
    except OSError:
        return True  # no /proc: assume it is ours rather than risk two writers
