"""A run's status from what is on disk: ``run.json`` and the store, read-only; what its
checkpoints are comes from the caller's verification (``engine.checkpoints.standing``).

``memtui status`` and ``memtui ls`` use ``offline_status`` for runs no supervisor serves;
the supervisor answers ``status`` with ``compose_status`` over the same store plus its
newest in-memory sample, so the two never disagree. Torch-free.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, NamedTuple

from engine.domain import (
    TERMINAL_STATES,
    RunState,
    RunStatus,
    SaveReport,
    StartupStatus,
    TelemetrySample,
    ThroughputFigures,
)
from engine.events import (
    CheckpointFailed,
    CheckpointSaved,
    CheckpointSkipped,
    FinalSaveMissed,
    RunStarted,
)
from engine.measures.eval_summary import EvalSummary
from engine.run.directory import RunDir
from engine.run.meta import RunMeta
from engine.run.reports.eval_history import stored_evals
from engine.run.reports.throughput import throughput_of
from engine.run.storage.store import Store, StoreError, damaged

# Sample fields copied into RunStatus as they are.
_SAMPLE_FIELDS = (
    "loss",
    "tokens_per_s",
    "mfu",
    "model_tflops",
    "step_time_s",
    "data_wait_s",
    "loss_scale",
    "mem_allocated",
    "mem_reserved",
    "mem_peak",
    "mem_process_peak",
    "mem_capacity",
    "mem_kind",
    "mem_device_used",
    "mem_fragmentation",
    "micro_batch",
    "grad_accum",
    "world_size",
    "metrics",
)
SAVE_EVENTS = (
    CheckpointSaved.event_type,
    CheckpointFailed.event_type,
    CheckpointSkipped.event_type,
    FinalSaveMissed.event_type,
)


def offline_status(
    run: RunDir,
    *,
    checkpoint_step: int | None = None,
    checkpoint_rejected: list[str] | None = None,
    strict: bool = False,
) -> RunStatus:
    """Status of ``run`` from disk; ``interrupted`` if it never ended and nobody serves it.
    The checkpoint fields are what the caller's full verification found
    (``Standing.status_fields``: ``engine.run`` is below ``engine.checkpoints``); without
    one they say nothing. A store that cannot be read is said in ``exit_reason`` (a listing
    of every run goes on); ``strict``: a StoreError naming the run instead, unless a live
    supervisor may be creating the file right now."""
    alive = run.supervisor_pid() is not None
    meta = RunMeta()
    latest: TelemetrySample | None = None
    report: TelemetrySample | None = None
    save: SaveReport | None = None
    last_eval: EvalSummary | None = None
    throughput: ThroughputFigures | None = None
    last_seq = whole_tree = 0
    if run.store.exists():
        try:
            with Store(run.store, readonly=True) as store:
                meta, latest, last_seq = store.read_meta(), store.latest_step(), store.last_seq()
                report, save, last_eval = rank_report(store, latest), save_report(store), eval_report(store)
                throughput, whole_tree = throughput_of(store), whole_tree_resumes(store)
        except (StoreError, sqlite3.Error) as err:
            # A supervisor creating the file right now, or a damaged file: say so, do not
            # crash a listing of every run.
            if strict and not alive:
                raise StoreError(
                    str(err) if isinstance(err, StoreError) else damaged(run.store, err)
                ) from None
            meta = RunMeta() if alive else RunMeta(exit_reason=f"store unreadable: {err}")
    return compose_status(
        run,
        identity_of(run),
        meta,
        latest,
        last_seq,
        supervisor_alive=alive,
        rank_report=report,
        last_save=save,
        last_eval=last_eval,
        throughput=throughput,
        checkpoint_step=checkpoint_step,
        checkpoint_rejected=checkpoint_rejected,
        whole_tree_resumes=whole_tree,
    )


def whole_tree_resumes(store: Store) -> int:
    """Supervisors that brought back a run whose supervisor died with its trainer
    (``RunStarted.after_whole_tree_death``): restarts across supervisor lives, which the
    meta's ``restarts`` (one supervisor's trainer restarts, carried on) does not count."""
    rows = store.query("SELECT data FROM events WHERE type = ?", (RunStarted.event_type,))
    count = 0
    for (data,) in rows:
        try:
            started = RunStarted.model_validate(json.loads(data))
        except ValueError:
            continue  # a damaged row: left out, never a crash
        count += started.after_whole_tree_death
    return count


def rank_report(store: Store, latest: TelemetrySample | None) -> TelemetrySample | None:
    """The newest sample with every rank's memory, looked for only when there are ranks."""
    if latest is None or latest.world_size <= 1:
        return None
    return latest if latest.ranks else store.latest_rank_report()


def save_report(store: Store) -> SaveReport | None:
    """The newest save's outcome from its event (saved, failed or skipped); None before any."""
    event = store.newest_event(SAVE_EVENTS)
    if event is None:
        return None
    saved = CheckpointSaved.of(event)
    if saved is not None:
        return SaveReport(outcome="saved", step=saved.step, tag=saved.tag, attempt=event.attempt)
    missed = CheckpointFailed.of(event) or CheckpointSkipped.of(event) or FinalSaveMissed.of(event)
    if missed is None:
        return None  # a damaged row: nothing to say rather than something wrong
    return SaveReport(
        outcome="skipped" if event.type == CheckpointSkipped.event_type else "failed",
        step=missed.step,
        tag=missed.tag,
        reason=missed.reason,
        attempt=event.attempt,
    )


def eval_report(store: Store) -> EvalSummary | None:
    """The newest eval that reads (a damaged row is passed over); None before any."""
    evals = stored_evals(store)
    return evals[-1].summary() if evals else None


def compose_status(
    run: RunDir,
    identity: RunIdentity,
    meta: RunMeta,
    latest: TelemetrySample | None,
    last_seq: int,
    *,
    supervisor_alive: bool,
    rank_report: TelemetrySample | None = None,
    last_save: SaveReport | None = None,
    last_eval: EvalSummary | None = None,
    held_by: str | None = None,
    throughput: ThroughputFigures | None = None,
    startup: StartupStatus | None = None,
    checkpoint_step: int | None = None,
    checkpoint_rejected: list[str] | None = None,
    whole_tree_resumes: int = 0,
) -> RunStatus:
    """RunStatus from the run's identity, its stored meta, its newest step sample, (several
    ranks) the newest sample that carried every rank's memory, the newest save's outcome,
    (its live supervisor's word) who holds training and the starting trainer's phase, and
    the run's tokens/s figures; the checkpoints as a full verification found them (the
    caller's: ``engine.checkpoints.standing``)."""
    run_id, name, target, node = identity
    state: RunState = meta.state or "starting"
    exit_reason = meta.exit_reason
    if state not in TERMINAL_STATES and not supervisor_alive:
        exit_reason = exit_reason or f"supervisor gone while {state}; the run never recorded an ending"
        state = "interrupted"
    fields: dict[str, Any] = {}
    if latest is not None:
        fields = {k: getattr(latest, k) for k in _SAMPLE_FIELDS}
        fields.update(step=latest.step, updated_at=latest.ts)
    if rank_report is not None and rank_report.ranks:
        fields.update(ranks=rank_report.ranks, ranks_step=rank_report.step)
    return RunStatus(
        run_id=run_id,
        name=name,
        state=state,
        run_dir=str(run.path),
        target_steps=target,
        restarts=meta.restarts,
        whole_tree_resumes=whole_tree_resumes,
        attempt=meta.attempt,
        started_at=meta.started_at,
        supervisor_pid=meta.supervisor_pid if supervisor_alive else None,
        trainer_pid=meta.trainer_pid if supervisor_alive else None,
        exit_reason=exit_reason,
        checkpoint_step=checkpoint_step,
        checkpoint_rejected=checkpoint_rejected or [],
        last_save=last_save,
        last_eval=last_eval,
        held_by=held_by if supervisor_alive else None,
        last_seq=last_seq,
        throughput=throughput,
        node=node,
        startup=startup if supervisor_alive and state not in TERMINAL_STATES else None,
        **fields,
    )


class RunIdentity(NamedTuple):
    run_id: str
    name: str
    target_steps: int
    node: str | None = None
    """Several nodes: this one's place in words (``node_role``); None on one host."""


def node_role(nodes: int, node_rank: int, endpoint: str | None) -> str | None:
    """What this node's supervisor is in a run over several nodes, in words."""
    if nodes <= 1:
        return None
    if node_rank == 0:
        return f"node 0 of {nodes} (rendezvous {endpoint}): the run's store, directives and consoles are here"
    return (
        f"node {node_rank} of {nodes}: follows node 0 (rendezvous {endpoint}); "
        "steps, directives and consoles are on node 0"
    )


def identity_of(run: RunDir) -> RunIdentity:
    """(run id, name, target steps) from run.json, read loosely: an old or damaged file
    still lists (a status is for looking, not for running)."""
    try:
        doc = json.loads(run.config_file.read_text(encoding="utf-8"))
        config = doc.get("config") or {}
        train = config.get("train") or {}
        return RunIdentity(
            str(doc.get("run_id") or run.run_id),
            str(config.get("name") or run.run_id),
            int(config.get("steps") or 0),
            node_role(
                int(train.get("nodes") or 1), int(train.get("node_rank") or 0), train.get("rdzv_endpoint")
            ),
        )
    except (OSError, ValueError, AttributeError, TypeError):
        return RunIdentity(run.run_id, run.run_id, 0)
