"""Committing checkpoints durably, and choosing the one to resume from. Torch-free.

A save is a transaction over ``checkpoints/``::

    quarantine leftover staging dirs  ->  check free space (skip with an alert if short)
    -> the writer (DeepSpeed) fills <tag>.staging/  ->  fsync every file
    -> manifest.json (sizes, sha256, resume state), fsync  ->  rename to <tag>, fsync dir
    -> verify <tag> against its manifest  ->  latest := <tag> (temp file + os.replace)
    -> prune older tags beyond keep/milestones (rename to <tag>.pruning, then delete)

``stage`` runs the first three (training waits for them); ``seal`` the rest, which
``engine.checkpoints.sealer`` may run on a background thread while training goes on.
A crash anywhere before the rename leaves a staging dir that is never resumed from (the
next resume moves it to ``quarantine/``, where the newest few are kept); a crash after it
leaves a complete tag. A save that fails on its own (a full disk mid-write) removes its
staging dir at once. Older tags are deleted only after the new one verified, and leave the
committed names by a rename first, so that nobody reads a half-deleted tag as one.
The writer is a callable so that the whole protocol is tested without torch.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.checkpoints import catalog
from engine.checkpoints.manifest import (
    MANIFEST_NAME,
    Manifest,
    Verdict,
    describe_files,
    read_manifest,
    verify_tag,
)
from engine.checkpoints.pins import pinned_steps
from engine.checkpoints.selection import (
    ResumePlan,
    plan_resume,
    select_newest_verified,
    space_needed,
    to_prune,
)
from engine.run.durable_file import fsync_dir, fsync_tree, replace_atomically

log = logging.getLogger(__name__)

SLOW_SAVE_ENV = "MEMTUI_CHAOS_SLOW_SAVE_S"
"""Chaos: seconds to sleep after the writer filled the staging dir, before the manifest
(widens the window in which a kill lands mid-save; tests use it)."""

Writer = Callable[[str], None]
"""Fills ``checkpoints/<staging name>/``; given the staging name (DeepSpeed's tag)."""


@dataclass(frozen=True)
class SaveOutcome:
    """What one save did. ``status``: saved | skipped (no room) | failed (writer or verify)
    | sealing (written; a background thread seals it, see engine.checkpoints.sealer)."""

    status: str
    step: int
    tag: str
    reason: str = ""
    seconds: float = 0.0
    """Wall time the save took: write plus seal (the training stall when sealing is not in
    the background)."""
    write_s: float = 0.0
    """Of which the writer (DeepSpeed's torch.save calls)."""
    seal_s: float = 0.0
    """Of which fsync + hashing + manifest + rename + verify."""
    size_bytes: int = 0
    free_bytes: int = 0
    needed_bytes: int = 0
    pruned: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Staged:
    """A save whose files are written into ``staging`` but not yet sealed (see ``seal``)."""

    step: int
    tag: str
    staging: str
    write_s: float
    """Seconds from the start of the save until the writer returned (free-space check included)."""
    free_bytes: int
    needed_bytes: int


@dataclass
class CheckpointStore:
    """The durable checkpoints of one run under ``directory``."""

    directory: Path
    keep: int = 3
    milestone_every: int = 0
    min_free_bytes: int = 0
    free_bytes: Callable[[Path], int] = field(default=lambda p: shutil.disk_usage(p).free)
    """Free bytes on the filesystem of a path (a test injects a full disk here)."""

    # ---------------------------------------------------------------------- save

    def save(
        self, step: int, write: Writer, manifest_fields: dict[str, Any], estimate_bytes: int
    ) -> SaveOutcome:
        """Run the save transaction for checkpoint ``step``; never raises for a failed write.

        ``manifest_fields``: the Manifest fields but tag, step, created_at and files.
        ``estimate_bytes``: the expected size when no earlier checkpoint tells it better.
        """
        staged = self.stage(step, write, estimate_bytes)
        if isinstance(staged, SaveOutcome):
            return staged
        return self.seal(staged, manifest_fields)

    def stage(self, step: int, write: Writer, estimate_bytes: int) -> Staged | SaveOutcome:
        """The first half of a save, the one training must wait for: check free space and
        let the writer fill the staging dir. Returns what ``seal`` needs, or the outcome of a
        save that ends here (skipped for room, failed writing); raises nothing."""
        started = time.perf_counter()
        tag, staging = catalog.tag_for(step), catalog.staging_for(step)
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, moved in self.quarantine_staging():
            log.warning("%s: half-written (a save cut short); moved to quarantine/%s", name, moved)
        self.finish_pruning()
        needed = space_needed(self._newest_size() or estimate_bytes, self.min_free_bytes)
        free = self.free_bytes(self.directory)
        if free < needed and (dropped := catalog.drop_quarantined_staging(self.directory, keep=0)):
            log.warning("short of disk for a save: deleted quarantine/%s", ", quarantine/".join(dropped))
            free = self.free_bytes(self.directory)  # a checkpoint is worth more than evidence
        if free < needed:
            reason = f"not enough free disk: {free} bytes free, {needed} needed; older checkpoints kept"
            return SaveOutcome("skipped", step, tag, reason, free_bytes=free, needed_bytes=needed)
        try:
            write(staging)
        except Exception as err:  # ENOSPC, EIO, a writer bug: the run goes on without this one
            self._discard(staging)
            return SaveOutcome(
                "failed", step, tag, f"writing failed: {_describe(err)}", time.perf_counter() - started
            )
        return Staged(step, tag, staging, time.perf_counter() - started, free, needed)

    def seal(self, staged: Staged, manifest_fields: dict[str, Any]) -> SaveOutcome:
        """The second half: fsync, manifest, rename, verify, ``latest``, prune. Safe on a
        background thread as long as no other save starts meanwhile (``stage`` clears
        staging dirs). ``seconds`` of the outcome is write plus seal time."""
        started = time.perf_counter()
        try:
            outcome = self._seal(staged.step, staged.tag, staged.staging, manifest_fields)
        except Exception as err:
            self._discard(staged.staging)
            outcome = SaveOutcome("failed", staged.step, staged.tag, f"sealing failed: {_describe(err)}")
        seal_s = time.perf_counter() - started
        return replace(
            outcome,
            seconds=staged.write_s + seal_s,
            write_s=staged.write_s,
            seal_s=seal_s,
            free_bytes=staged.free_bytes,
            needed_bytes=staged.needed_bytes,
        )

    def _seal(self, step: int, tag: str, staging: str, fields: dict[str, Any]) -> SaveOutcome:
        staged = self.directory / staging
        _chaos_pause()
        manifest = Manifest(
            tag=tag, step=step, created_at=time.time(), files=describe_files(staged), **fields
        )
        fsync_tree(staged)  # data first, then the manifest that vouches for it
        (staged / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=1), encoding="utf-8")
        fsync_tree(staged)
        final = self.directory / tag
        if final.exists():  # an older attempt's tag of the same step (quarantined, not lost)
            catalog.quarantine(self.directory, tag)
        os.rename(staged, final)
        fsync_dir(self.directory)
        verdict = verify_tag(final, step, "full", record="update")  # a resume need not hash it again
        if not verdict.ok:
            moved = catalog.quarantine(self.directory, tag)
            return SaveOutcome(
                "failed",
                step,
                tag,
                f"did not verify after writing: {verdict.problem} (moved to {moved.name})",
            )
        replace_atomically(self.directory / catalog.LATEST_NAME, tag.encode())
        pruned = self._prune(step)
        return SaveOutcome("saved", step, tag, size_bytes=manifest.size_bytes, pruned=pruned)

    def _prune(self, newest: int) -> list[str]:
        """Delete committed tags beyond keep/milestones/pins: each is renamed ``<tag>.pruning``
        first (atomic), so that a reader sees a whole tag or one being deleted, never a
        committed tag with files missing. Returns the tags pruned."""
        steps = [s for s, _ in catalog.committed_tags(self.directory)]
        pruned = []
        for step in to_prune(steps, self.keep, self.milestone_every, newest, pinned_steps(self.directory)):
            doomed = self.directory / catalog.pruning_for(step)
            shutil.rmtree(doomed, ignore_errors=True)  # a deletion a crash cut short
            try:
                os.rename(self.directory / catalog.tag_for(step), doomed)
            except OSError as err:
                log.warning("could not prune %s: %s", catalog.tag_for(step), err)
                continue
            pruned.append(catalog.tag_for(step))
        if pruned:
            fsync_dir(self.directory)
            self.finish_pruning()
        return pruned

    def finish_pruning(self) -> None:
        """Delete the tags renamed for pruning (also those a crash left half-deleted)."""
        for _step, name in catalog.pruning_tags(self.directory):
            shutil.rmtree(self.directory / name, ignore_errors=True)

    def room_for_checkpoints(self) -> tuple[int, int]:
        """(the newest checkpoint's size, the bytes checkpoints may occupy: free disk plus
        the committed checkpoints, which the rotation replaces, less ``min_free_bytes``)."""
        held = 0
        for _step, tag in catalog.committed_tags(self.directory):
            try:
                held += read_manifest(self.directory / tag).size_bytes
            except (OSError, ValueError):
                continue
        room = self.free_bytes(self.directory) + held - self.min_free_bytes
        return self._newest_size(), max(0, room)

    def _newest_size(self) -> int:
        for _step, tag in reversed(catalog.committed_tags(self.directory)):
            try:
                return read_manifest(self.directory / tag).size_bytes
            except (OSError, ValueError):
                continue
        return 0

    def quarantine_staging(self) -> list[tuple[str, str]]:
        """Move staging dirs left by a save a crash cut short into ``quarantine/`` (for a
        post-mortem; only the newest ``catalog.QUARANTINED_STAGING_KEPT`` stay there, and
        all of them go before a save would be skipped for room). Returns (name, the name it
        has in quarantine/) of each. Call it only while no save is in flight."""
        moved = []
        for _step, name in catalog.staging_tags(self.directory):
            try:
                moved.append((name, catalog.quarantine(self.directory, name).name))
            except OSError as err:  # cannot move it: it must not linger as a staging dir
                log.warning("could not quarantine %s (%s): deleting it", name, err)
                self._discard(name)
        if moved:
            for gone in catalog.drop_quarantined_staging(self.directory):
                log.info("deleted quarantine/%s: only the newest half-written saves are kept", gone)
        return moved

    def _discard(self, name: str) -> None:
        shutil.rmtree(self.directory / name, ignore_errors=True)

    # -------------------------------------------------------------------- resume

    def plan_resume(self, allow_fresh: bool) -> tuple[ResumePlan, list[Verdict]]:
        """Choose the newest tag that verifies (full check, hashing only the files changed
        since a verification recorded beside the tag); returns the plan and the newer tags
        rejected on the way, each with its problem."""
        verdicts = catalog.verdicts_newest_first(self.directory, "full", record="update")
        selection = select_newest_verified(verdicts)
        plan = plan_resume(selection, catalog.committed_before(self.directory), allow_fresh)
        return plan, selection.rejected

    def set_aside(self, rejected: list[Verdict], plan: ResumePlan) -> dict[str, str]:
        """After a resume or fresh plan: move rejected tags to quarantine (so a later save of
        the same step cannot collide and no later resume re-reads them) and point ``latest``
        at the chosen tag (or remove it for a fresh start). Returns each moved tag's name in
        ``quarantine/``, by tag."""
        moved = {
            v.tag: catalog.quarantine(self.directory, v.tag).name
            for v in rejected
            if (self.directory / v.tag).exists()
        }
        pointer = self.directory / catalog.LATEST_NAME
        if plan.chosen is not None:
            if catalog.latest_tag(self.directory) != plan.chosen.tag:
                replace_atomically(pointer, plan.chosen.tag.encode())
        elif pointer.exists():
            pointer.unlink()
            fsync_dir(self.directory)
        return moved


def newest_verified_step(directory: Path, check: str = "quick") -> int | None:
    """Step of the newest tag that verifies (the supervisor's estimate of where a restart resumes)."""
    selection = select_newest_verified(catalog.verdicts_newest_first(directory, check))  # type: ignore[arg-type]
    return selection.chosen.step if selection.chosen else None


def _chaos_pause() -> None:
    delay = float(os.environ.get(SLOW_SAVE_ENV) or 0)
    if delay > 0:
        time.sleep(delay)


def _describe(err: BaseException) -> str:
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return f"disk full ({err})"
    return f"{type(err).__name__}: {err}"
