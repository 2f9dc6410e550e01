"""DeepSpeed checkpoints made durable, and resuming from the newest one that verifies.

DeepSpeed's own save is not atomic (plain ``torch.save`` to the final path, no fsync,
``latest`` rewritten in place) and ``load_checkpoint`` with no ``latest`` silently returns
``(None, None)``. So DeepSpeed only ever writes a staging tag; ``engine.checkpoints.store``
seals it (fsync, manifest with sha256 of every file, rename, ``latest`` by ``os.replace``)
and picks the tag to resume from. This module is the torch side: the writer, the RNG
states, and restoring what DeepSpeed does not.

DeepSpeed's ``client_state`` keeps carrying the data position, geometry and counters (it
sits inside the hashed model-states file); the manifest repeats what a resume needs to
know before it loads anything.

With several ranks, rank 0 runs the store's transaction (free-disk check, seal, prune) and
the others follow: rank 0 broadcasts the staging tag (or None: skipped), every rank writes
its shards into it (``save_checkpoint`` is a collective), an all-reduce shares any write
failure (and is the barrier), then rank 0 seals and broadcasts the outcome so that every
rank counts the same last saved step. On resume rank 0 verifies and chooses; every rank
loads the chosen tag.
"""

from __future__ import annotations

import base64
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.checkpoints.catalog import committed_tags, tag_for  # noqa: F401  (re-exported for callers)
from engine.checkpoints.manifest import Manifest, config_hash
from engine.checkpoints.sealer import CheckpointSealer
from engine.checkpoints.selection import to_prune
from engine.checkpoints.store import CheckpointStore, SaveOutcome
from engine.config.run_config import RunConfig
from engine.events import CheckpointRejected, FreshStart
from engine.run.directory import RunDir
from engine.trainer.chaos.disk_full_injection import disk_full_if_due
from engine.trainer.checkpoints import universal_checkpoint
from engine.trainer.checkpoints.universal_checkpoint import partitioned
from engine.trainer.ranks.rank_group import RankGroup

log = logging.getLogger(__name__)

BYTES_PER_PARAM_ESTIMATE = 16  # fp16 weights 2 + fp32 master 4 + Adam moments 8, rounded up


class NoVerifiedCheckpoint(RuntimeError):
    """Checkpoints existed but none verifies, and no fresh start was asked for."""


@dataclass(frozen=True)
class Resumed:
    """What a loaded checkpoint said; ``step`` is the next optimizer step's data position."""

    path: str
    tag: str
    step: int
    client_state: dict[str, Any]
    skipped: list[str]
    """Newer tags passed over, each ``"<tag>: <problem>"``."""
    converted_from_world: int | None = None
    """The tag was written by this many ranks and loaded through a universal conversion."""


def tags_on_disk(directory: Path) -> list[tuple[int, str]]:
    """(step, tag) of every committed ``global_step{N}`` directory, oldest first."""
    return committed_tags(directory)


def tags_to_prune(steps_and_tags: list[tuple[int, str]], keep: int, newest: str) -> list[str]:
    """Tags beyond the newest ``keep`` (by step), newest first; never ``newest`` itself."""
    steps = {step: tag for step, tag in steps_and_tags}
    newest_step = next((s for s, t in steps_and_tags if t == newest), max(steps, default=0))
    return [steps[s] for s in sorted(to_prune(steps, keep, 0, newest_step), reverse=True)]


def store_for(config: RunConfig, run: RunDir) -> CheckpointStore:
    ck = config.checkpoint
    return CheckpointStore(
        run.checkpoints, keep=ck.keep, milestone_every=ck.milestone_every, min_free_bytes=ck.min_free_mb << 20
    )


# --------------------------------------------------------------------------- save


def save(
    engine: Any,
    store: CheckpointStore,
    config: RunConfig,
    client_state: dict[str, Any],
    directives: list[dict[str, Any]] | None = None,
    group: RankGroup | None = None,
    sealer: CheckpointSealer | None = None,
) -> SaveOutcome:
    """Checkpoint ``engine`` at its current step through ``store``; never raises for a
    failed or skipped save (the outcome says which, and the older checkpoints stay).

    With a ``sealer`` (rank 0's), the save returns once every file is written, with status
    ``sealing``; the sealer's thread commits it and its outcome comes from the sealer.
    Every rank calls it at the same step; all of them get rank 0's outcome."""
    group = group or RankGroup()
    outcome: SaveOutcome | None = None
    rank_rng = group.gather(capture_rng())  # each rank draws its own dropout and noise
    if group.leader:
        outcome = _save_as_leader(engine, store, config, client_state, directives, group, sealer, rank_rng)
    else:
        _save_as_follower(engine, store, client_state, group)
    shared: SaveOutcome = group.broadcast(outcome)  # rank 0's outcome on every rank
    return shared


def _save_as_follower(
    engine: Any, store: CheckpointStore, client_state: dict[str, Any], group: RankGroup
) -> None:
    """Write this rank's shards into the tag rank 0 names (None: rank 0 skipped the save)."""
    staging_tag = group.broadcast(None)
    if staging_tag is not None:
        error = _write_shards(engine, store, staging_tag, client_state, group)
        if error is not None:
            log.warning("rank %d: checkpoint %s not written: %s", group.rank, staging_tag, error)


def _write_shards(
    engine: Any, store: CheckpointStore, staging_tag: str, client_state: dict[str, Any], group: RankGroup
) -> BaseException | None:
    """Every rank writes its files into ``staging_tag``; returns the error to report (this
    rank's own, or that another rank failed), raising nothing. The all-reduce that shares
    the failures is also the barrier after which rank 0 may seal the tag."""
    error: BaseException | None = None
    try:
        with disk_full_if_due(engine, int(engine.global_steps)):  # chaos, off unless asked
            engine.save_checkpoint(
                str(store.directory), tag=staging_tag, client_state=client_state, save_latest=False
            )
    except Exception as err:  # ENOSPC, EIO: this save fails, the run goes on
        error = err
    if group.max_ints([error is not None])[0] and error is None:
        error = OSError("another rank could not write its part of the checkpoint")
    return error


def _save_as_leader(
    engine: Any,
    store: CheckpointStore,
    config: RunConfig,
    client_state: dict[str, Any],
    directives: list[dict[str, Any]] | None,
    group: RankGroup,
    sealer: CheckpointSealer | None,
    rank_rng: list[dict[str, Any]],
) -> SaveOutcome:
    step = int(engine.global_steps)
    samples = int(engine.global_samples)
    told = False  # the followers learnt the staging tag (or that there is none)

    def write(staging_tag: str) -> None:
        nonlocal told
        told = True
        group.broadcast(staging_tag)
        error = _write_shards(engine, store, staging_tag, client_state, group)
        if error is not None:
            raise error  # the store discards the staging tag and keeps the older ones

    fields = {
        "samples": samples,
        "config_hash": config_hash(config.model_dump(mode="json")),
        "data_position": {"step": step, "samples": samples},
        "rng": rank_rng[0],
        "rank_rng": rank_rng,
        "micro_batch": int(engine.train_micro_batch_size_per_gpu()),
        "grad_accum": int(engine.gradient_accumulation_steps()),
        "world_size": int(client_state.get("world_size", 1)),
        "directives": list(directives or []),
    }
    estimate = sum(p.numel() for p in engine.module.parameters()) * BYTES_PER_PARAM_ESTIMATE
    staged = store.stage(step, write, estimate)
    if not told:
        group.broadcast(None)  # skipped before writing (no room): the followers skip too
    if isinstance(staged, SaveOutcome):
        return staged  # skipped or failed: nothing to seal
    if sealer is None:
        return store.seal(staged, fields)
    sealer.submit(lambda: store.seal(staged, fields))
    return SaveOutcome(
        "sealing",
        step,
        staged.tag,
        seconds=staged.write_s,
        write_s=staged.write_s,
        free_bytes=staged.free_bytes,
        needed_bytes=staged.needed_bytes,
    )


# ------------------------------------------------------------------------- resume


def resume(
    engine: Any,
    store: CheckpointStore,
    allow_fresh: bool,
    link: Any,
    group: RankGroup | None = None,
    before_load: Callable[[str], None] | None = None,
) -> Resumed | None:
    """Load the newest checkpoint that verifies; None for a fresh start at step 0.

    Every tag passed over, and every staging dir a crash left, gets a
    ``checkpoint_rejected`` event naming its problem and is moved to ``quarantine/``.
    Raises NoVerifiedCheckpoint when checkpoints existed but none verifies and
    ``allow_fresh`` is False: a silent fresh start would throw the run away.
    With several ranks, rank 0 verifies and chooses and every rank loads the same tag.
    """
    group = group or RankGroup()
    plan = _choose(store, allow_fresh, link) if group.leader else None
    plan = group.broadcast(plan)
    if plan.action == "refuse":
        raise NoVerifiedCheckpoint(plan.reason)
    if plan.action == "fresh" or plan.chosen is None:
        return None
    chosen, manifest = plan.chosen, plan.chosen.manifest
    assert manifest is not None  # a verified tag has one
    tag_dir = store.directory / chosen.tag
    if before_load is not None and group.leader:
        before_load(chosen.tag)  # the trainer's loading_checkpoint phase
    if manifest.world_size != group.world and partitioned(tag_dir):
        path, client_state = _load_at_new_world(engine, tag_dir, manifest.world_size, group)
        converted: int | None = manifest.world_size
    else:
        path, client_state = engine.load_checkpoint(str(store.directory), tag=chosen.tag)
        converted = None
    if path is None:
        raise RuntimeError(f"DeepSpeed could not load {tag_dir}, which verified")
    restore_after_load(engine, manifest, group.rank)
    return Resumed(
        path=str(path),
        tag=chosen.tag,
        step=manifest.step,
        client_state=dict(client_state or {}),
        skipped=list(plan.skipped),
        converted_from_world=converted,
    )


def _load_at_new_world(engine: Any, tag_dir: Path, saved_world: int, group: RankGroup) -> tuple[Any, Any]:
    """Rank 0 converts the tag to a universal checkpoint, every rank loads it, rank 0 removes
    it. A failed conversion stops every rank with the same error."""
    out_dir, error = tag_dir.parent / universal_checkpoint.UNIVERSAL_DIR / tag_dir.name, ""
    if group.leader:
        log.info(
            "%s was written by %d ranks, this attempt has %d: converting",
            tag_dir.name,
            saved_world,
            group.world,
        )
        try:
            universal_checkpoint.convert(tag_dir, saved_world, group.world)
        except universal_checkpoint.UniversalConversionFailed as err:
            error = str(err)
    error = group.broadcast(error)  # also the barrier: the others wait for the conversion
    if error:
        raise universal_checkpoint.UniversalConversionFailed(error)
    loaded = universal_checkpoint.load_universal(engine, out_dir)
    group.max_ints([0])  # every rank has read it
    if group.leader:
        universal_checkpoint.remove(out_dir)
    return loaded


@dataclass(frozen=True)
class _Choice:
    """Rank 0's resume decision, as broadcast to the other ranks (picklable)."""

    action: str
    reason: str
    chosen: Any  # the Verdict to load, or None
    skipped: list[str]


def _choose(store: CheckpointStore, allow_fresh: bool, link: Any) -> _Choice:
    """Verify, choose, report and set aside (rank 0 only: it reads and moves files)."""
    for name, staged in store.quarantine_staging():
        link.event(
            CheckpointRejected(tag=name, problem="half-written: a save cut short", quarantined=staged),
            f"{name}: half-written (a save cut short); moved to quarantine/{staged}",
        )
    plan, rejected = store.plan_resume(allow_fresh)
    moved = {} if plan.action == "refuse" else store.set_aside(rejected, plan)
    for verdict in rejected:
        where = moved.get(verdict.tag)
        link.event(
            CheckpointRejected(
                tag=verdict.tag, step=verdict.step, problem=verdict.problem, quarantined=where
            ),
            f"{verdict.tag}: {verdict.problem}; " + (f"moved to quarantine/{where}" if where else "skipped"),
        )
    skipped = [f"{v.tag}: {v.problem}" for v in rejected]
    if plan.action == "refuse":
        return _Choice("refuse", plan.reason, None, skipped)
    if plan.action == "fresh" or plan.chosen is None:
        if rejected or allow_fresh:
            link.event(FreshStart(), plan.reason)
        return _Choice("fresh", plan.reason, None, skipped)
    return _Choice("resume", plan.reason, plan.chosen, skipped)


def restore_after_load(engine: Any, manifest: Manifest, rank: int = 0) -> None:
    """What ``load_checkpoint`` leaves out: RNG and batch geometry. The directive values a
    ZeRO load overwrites (loss scaler, clip norm) come back through the loop's
    ``DirectiveApplier.restore`` from ``client_state["directives"]``, before the first step.
    Each rank takes its own RNG states back; a rank the checkpoint had not (a resume at more
    ranks, or a checkpoint written before ranks kept theirs) takes rank 0's."""
    own = manifest.rank_rng[rank] if rank < len(manifest.rank_rng) else manifest.rng
    restore_rng(own)
    restore_geometry(engine, manifest.micro_batch, manifest.grad_accum, manifest.world_size)


def restore_geometry(engine: Any, micro_batch: int, grad_accum: int, world_size: int) -> None:
    """DeepSpeed restores no batch sizes: set the checkpoint's micro-batch, then the global
    batch (which recomputes GAS), as docs/deepspeed.md says. A fresh engine's micro_steps is 0,
    aligned to any GAS."""
    if (int(engine.train_micro_batch_size_per_gpu()), int(engine.gradient_accumulation_steps())) == (
        micro_batch,
        grad_accum,
    ):
        return
    engine.set_train_micro_batch_size(micro_batch)
    engine.set_train_batch_size(micro_batch * grad_accum * world_size)


# --------------------------------------------------------------------------- RNG


def capture_rng() -> dict[str, Any]:
    """Python's and torch's RNG states as JSON-safe values (torch states as base64)."""
    version, state, gauss = random.getstate()
    rng: dict[str, Any] = {
        "python": [version, list(state), gauss],
        "torch_cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["torch_cuda"] = [
            base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()
        ]
    return rng


def restore_rng(rng: dict[str, Any]) -> None:
    if "python" in rng:
        version, state, gauss = rng["python"]
        random.setstate((version, tuple(state), gauss))
    if "torch_cpu" in rng:
        torch.set_rng_state(_byte_tensor(rng["torch_cpu"]))
    if "torch_cuda" in rng and torch.cuda.is_available():
        states = [_byte_tensor(s) for s in rng["torch_cuda"]]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


def _byte_tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()
