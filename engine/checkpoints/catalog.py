"""What is in a run's ``checkpoints/`` directory: committed tags, half-written staging
tags, tags being pruned, the ``latest`` pointer and the quarantine, each checked against
its manifest.

::

    checkpoints/
      global_step120/            committed: renamed into place after its manifest
        manifest.json  mp_rank_00_model_states.pt  ...
      global_step140.staging/    a save in progress, or one a crash interrupted
      global_step80.pruning/     an old tag being deleted (renamed out of the committed names first)
      latest                     "global_step120", replaced atomically
      quarantine/                tags that failed verification (never deleted), and the
                                 staging dirs crashes left (the newest QUARANTINED_STAGING_KEPT)

A listing never calls a tag verified unless its manifest, its sizes (and with a full check
its hashes) were read and the directory was still there afterwards: a tag that vanishes
while it is checked (pruned) is left out, and one whose size cannot be read is
``unreadable``. Torch-free: the trainer, the supervisor and ``memtui checkpoints`` read it.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.checkpoints.manifest import Check, RecordUse, Verdict, verify_tag

TAG_PATTERN = re.compile(r"^global_step(\d+)$")
STAGING_PATTERN = re.compile(r"^global_step(\d+)\.staging$")
PRUNING_PATTERN = re.compile(r"^global_step(\d+)\.pruning$")
QUARANTINED_STAGING = re.compile(r"^global_step(\d+)\.staging-(\d{8}-\d{6})(?:-(\d+))?$")
STAGING_SUFFIX = ".staging"
PRUNING_SUFFIX = ".pruning"
QUARANTINED_STAGING_KEPT = 2
"""Half-written staging dirs kept in ``quarantine/`` for a post-mortem (each is up to a
whole checkpoint's size); older ones are deleted when a newer one is moved there."""
LATEST_NAME = "latest"
QUARANTINE_NAME = "quarantine"


def tag_for(step: int) -> str:
    return f"global_step{step}"


def staging_for(step: int) -> str:
    return f"{tag_for(step)}{STAGING_SUFFIX}"


def pruning_for(step: int) -> str:
    return f"{tag_for(step)}{PRUNING_SUFFIX}"


def _matching(directory: Path, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    if not directory.is_dir():
        return []
    found = [
        (int(m.group(1)), p.name) for p in directory.iterdir() if p.is_dir() and (m := pattern.match(p.name))
    ]
    return sorted(found)


def committed_tags(directory: Path) -> list[tuple[int, str]]:
    """(step, tag) of every committed tag directory, oldest first."""
    return _matching(directory, TAG_PATTERN)


def staging_tags(directory: Path) -> list[tuple[int, str]]:
    """(step, name) of every staging directory (a save in flight or cut short)."""
    return _matching(directory, STAGING_PATTERN)


def pruning_tags(directory: Path) -> list[tuple[int, str]]:
    """(step, name) of every tag being deleted (or whose deletion a crash cut short)."""
    return _matching(directory, PRUNING_PATTERN)


def latest_tag(directory: Path) -> str | None:
    try:
        return (directory / LATEST_NAME).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def committed_before(directory: Path) -> bool:
    """The run had a committed checkpoint once: a ``latest`` pointer or a tag directory."""
    return (directory / LATEST_NAME).is_file() or bool(committed_tags(directory))


def verdicts_newest_first(
    directory: Path, check: Check = "full", record: RecordUse = "ignore"
) -> Iterator[Verdict]:
    """Each committed tag checked, newest first, lazily (a full check reads the whole tag,
    but for what its verification record vouches for: see ``verify_tag``)."""
    for step, tag in reversed(committed_tags(directory)):
        yield verify_tag(directory / tag, step, check, record)


def quarantine(directory: Path, name: str) -> Path:
    """Move ``directory/name`` aside into ``quarantine/`` (kept for a post-mortem)."""
    target_dir = directory / QUARANTINE_NAME
    target_dir.mkdir(exist_ok=True)
    target = target_dir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while target.exists():
        n += 1
        target = target_dir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    (directory / name).rename(target)
    return target


def quarantined_staging(directory: Path) -> list[Path]:
    """The staging dirs moved into ``quarantine/``, oldest first (by the time they were moved)."""
    found: list[tuple[str, int, int, Path]] = []
    try:
        entries = list((directory / QUARANTINE_NAME).iterdir())
    except OSError:
        return []
    for path in entries:
        if m := QUARANTINED_STAGING.match(path.name):
            # the second it was moved, then (several in one second) the collision count and
            # the step: a newer save has the higher step
            found.append((m.group(2), int(m.group(3) or 1), int(m.group(1)), path))
    return [path for *_, path in sorted(found)]


def drop_quarantined_staging(directory: Path, keep: int = QUARANTINED_STAGING_KEPT) -> list[str]:
    """Delete all but the newest ``keep`` quarantined staging dirs; returns the names deleted.
    Tags that failed verification are never deleted here."""
    doomed = quarantined_staging(directory)
    doomed = doomed[: max(0, len(doomed) - keep)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return [path.name for path in doomed]


# ------------------------------------------------------------------ for listing


@dataclass(frozen=True)
class Listed:
    """One row of ``memtui checkpoints``."""

    tag: str
    step: int
    state: str
    """verified | checked (quick: sizes only) | corrupt | half-written | unreadable | staging
    | pruning"""
    problem: str | None
    size_bytes: int
    mtime: float
    latest: bool


STAGING_PROBLEM = "a save in progress or cut short"
PRUNING_PROBLEM = "being deleted: older than the checkpoints kept"


def list_checkpoints(directory: Path, check: Check = "full") -> list[Listed]:
    """Every committed, staging and pruning tag, newest first, each checked (``check``).
    A tag that disappears while it is listed (pruned meanwhile) is left out."""
    pointer = latest_tag(directory)
    rows = [
        row
        for step, tag in committed_tags(directory)
        if (row := _committed(directory / tag, step, check, tag == pointer)) is not None
    ]
    for pattern, state, problem in (
        (STAGING_PATTERN, "staging", STAGING_PROBLEM),
        (PRUNING_PATTERN, "pruning", PRUNING_PROBLEM),
    ):
        for step, name in _matching(directory, pattern):
            found = _footprint(directory / name)
            if found is not None:
                rows.append(Listed(name, step, state, problem, found[0], found[1], False))
    rank = {"staging": 1, "pruning": 0}  # of one step: the committed tag first
    return sorted(rows, key=lambda r: (r.step, rank.get(r.state, 2)), reverse=True)


def _committed(path: Path, step: int, check: Check, latest: bool) -> Listed | None:
    """One committed tag's row; None if the tag vanished while it was checked."""
    verdict = verify_tag(path, step, check)
    found = _footprint(path)
    if found is None or not path.is_dir():
        return None  # pruned (renamed away) or deleted meanwhile: no longer a checkpoint
    size, mtime, unreadable = found
    problem = verdict.problem
    if verdict.ok and unreadable is not None:
        state, problem = "unreadable", unreadable
    elif verdict.ok:
        state = "verified" if check == "full" else "checked"
    elif (problem or "").startswith("half-written"):
        state = "half-written"
    else:
        state = "corrupt"
    return Listed(path.name, step, state, problem, size, mtime, latest)


def _footprint(path: Path) -> tuple[int, float, str | None] | None:
    """(bytes of every file under ``path``, its mtime, why a size could not be read or
    None); None when ``path`` is gone."""
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    size, problems = 0, []

    def unlisted(err: OSError) -> None:
        problems.append(f"cannot list {err.filename}: {err.strerror}")

    for dirpath, _dirs, names in os.walk(path, onerror=unlisted):
        for name in names:
            try:
                size += os.stat(os.path.join(dirpath, name)).st_size
            except OSError as err:
                problems.append(f"cannot read the size of {name}: {err.strerror}")
    return size, mtime, problems[0] if problems else None
