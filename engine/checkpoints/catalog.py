"""What is in a run's ``checkpoints/`` directory: committed tags, half-written staging
tags, the ``latest`` pointer and the quarantine, each checked against its manifest.

::

    checkpoints/
      global_step120/            committed: renamed into place after its manifest
        manifest.json  mp_rank_00_model_states.pt  ...
      global_step140.staging/    a save in progress, or one a crash interrupted
      latest                     "global_step120", replaced atomically
      quarantine/                tags that failed verification, moved aside (never deleted)

Torch-free: the trainer, the supervisor and ``memtui checkpoints`` all read it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.checkpoints.manifest import Check, Verdict, verify_tag

TAG_PATTERN = re.compile(r"^global_step(\d+)$")
STAGING_PATTERN = re.compile(r"^global_step(\d+)\.staging$")
STAGING_SUFFIX = ".staging"
LATEST_NAME = "latest"
QUARANTINE_NAME = "quarantine"


def tag_for(step: int) -> str:
    return f"global_step{step}"


def staging_for(step: int) -> str:
    return f"{tag_for(step)}{STAGING_SUFFIX}"


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


def latest_tag(directory: Path) -> str | None:
    try:
        return (directory / LATEST_NAME).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def committed_before(directory: Path) -> bool:
    """The run had a committed checkpoint once: a ``latest`` pointer or a tag directory."""
    return (directory / LATEST_NAME).is_file() or bool(committed_tags(directory))


def verdicts_newest_first(directory: Path, check: Check = "full") -> Iterator[Verdict]:
    """Each committed tag checked, newest first, lazily (a full check reads the whole tag)."""
    for step, tag in reversed(committed_tags(directory)):
        yield verify_tag(directory / tag, step, check)


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


# ------------------------------------------------------------------ for listing


@dataclass(frozen=True)
class Listed:
    """One row of ``memtui checkpoints``."""

    tag: str
    step: int
    state: str
    """verified | checked (quick: sizes only) | corrupt | half-written | staging"""
    problem: str | None
    size_bytes: int
    mtime: float
    latest: bool


def list_checkpoints(directory: Path, check: Check = "full") -> list[Listed]:
    """Every committed and staging tag, newest first, each checked (``check``)."""
    pointer = latest_tag(directory)
    rows: list[Listed] = []
    for step, tag in committed_tags(directory):
        verdict = verify_tag(directory / tag, step, check)
        if verdict.ok:
            state = "verified" if check == "full" else "checked"
        else:
            state = "half-written" if (verdict.problem or "").startswith("half-written") else "corrupt"
        rows.append(
            Listed(
                tag,
                step,
                state,
                verdict.problem,
                _size(directory / tag),
                _mtime(directory / tag),
                tag == pointer,
            )
        )
    for step, name in staging_tags(directory):
        rows.append(
            Listed(
                name,
                step,
                "staging",
                "a save in progress or cut short",
                _size(directory / name),
                _mtime(directory / name),
                False,
            )
        )
    return sorted(rows, key=lambda r: (r.step, r.state != "staging"), reverse=True)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
