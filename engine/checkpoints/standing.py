"""Where the run's checkpoints stand, from the catalog's full verification: the newest tag a
resume would load, every tag that verifies, and the newer ones that do not (with why).

Every statement about a checkpoint (``status``, chaos confirmations) reads this, never the
``latest`` pointer or the newest ``checkpoint_saved`` event: a tag corrupted after it was
saved is named corrupt here as in ``memtui checkpoints``. A full check hashes every file, so
verdicts are kept per tag while none of its files changed (same names, sizes and
modification times, in nanoseconds): an in-place corruption, a truncation or a new tag of the
same name is checked again. Torch-free; blocking (a new tag is hashed): call it off an event
loop.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.checkpoints import catalog
from engine.checkpoints.manifest import Verdict, verify_tag

Signature = tuple[tuple[str, int, int], ...]
"""(path under the tag, size in bytes, mtime in ns) of every file of a tag, sorted."""


@dataclass(frozen=True)
class Standing:
    """The committed tags as a full verification finds them."""

    verified: tuple[tuple[int, str], ...] = ()
    """(step, tag) of every tag that verifies, newest first: a resume loads the first."""
    rejected: tuple[str, ...] = ()
    """``tag: problem`` of the tags newer than the first verified one that do not verify
    (a resume skips them); oldest tags that fail are not a resume's concern."""
    on_disk: int = 0
    """Committed tags in ``checkpoints/`` (those that do not verify included)."""

    @property
    def step(self) -> int | None:
        """Where a resume starts: the newest verified tag's step; None: none verifies."""
        return self.verified[0][0] if self.verified else None

    @property
    def tag(self) -> str | None:
        return self.verified[0][1] if self.verified else None

    def status_fields(self) -> dict[str, Any]:
        """What ``RunStatus`` says of the checkpoints (``compose_status``'s keywords)."""
        return {"checkpoint_step": self.step, "checkpoint_rejected": list(self.rejected)}


_verdicts: dict[Path, tuple[Signature, Verdict]] = {}
_lock = threading.Lock()


def standing_of(directory: Path) -> Standing:
    """The committed tags of ``directory``, each verified in full (or as last verified, when
    none of its files changed since)."""
    tags = list(reversed(catalog.committed_tags(directory)))
    _forget_all_but(directory, {directory / tag for _, tag in tags})
    verdicts = [v for step, tag in tags if (v := _verdict(directory / tag, step)) is not None]
    verified = tuple((v.step, v.tag) for v in verdicts if v.ok)
    newest_ok = verified[0][0] if verified else -1
    rejected = tuple(f"{v.tag}: {v.problem}" for v in verdicts if not v.ok and v.step > newest_ok)
    return Standing(verified, rejected, len(tags))


def _forget_all_but(directory: Path, present: set[Path]) -> None:
    """Drop the verdicts of ``directory``'s tags that are gone (pruned, quarantined)."""
    with _lock:
        for path in [p for p in _verdicts if p.parent == directory and p not in present]:
            del _verdicts[path]


def _verdict(path: Path, step: int) -> Verdict | None:
    """``path`` verified in full, or its cached verdict; None if it vanished meanwhile."""
    signature = _signature(path)
    if signature is None:
        return None
    with _lock:
        cached = _verdicts.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    verdict = verify_tag(path, step, "full", record="read")  # the trainer's record spares a hash
    after = _signature(path)
    if after is None:
        return None  # pruned (renamed away) while it was read: no longer a checkpoint
    if after == signature:  # unchanged while it was read: worth keeping
        with _lock:
            _verdicts[path] = (signature, verdict)
    return verdict


def _signature(path: Path) -> Signature | None:
    found: list[tuple[str, int, int]] = []
    if not path.is_dir():
        return None
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except OSError:
                continue  # gone meanwhile: the verification says what is missing
            found.append((os.path.relpath(full, path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))
