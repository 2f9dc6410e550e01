"""A tag's full verification, remembered beside it so that a restart need not hash it again.

``<tag>/verified.json`` names the manifest it checked against (its sha256) and, for every
file that hashed as the manifest says, its size, modification and change times (ns) and
inode as they were when it was read. A later full verification hashes only the files whose
figures differ: a file written to, truncated, replaced or copied (even with its mtime set
back: the change time moves with any write) is hashed again, and fails if it changed.

A coarse filesystem clock stamps every write within one tick (1-10 ms) alike, so a file
changed in the tick it was last stamped in would look unchanged: a file vouches only if it
was last changed ``SLACK_NS`` before it was read (``settle`` waits that out for a tag just
written). Silent decay of the disk's bits changes no figure: ``memtui checkpoints`` still
hashes everything. The record is best effort: unreadable, torn or for another manifest, it
vouches for nothing; it is written atomically and a failed write is ignored. Torch-free.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

RECORD_NAME = "verified.json"
RECORD_FORMAT = 1
SLACK_NS = 20_000_000
"""A file must have been last changed this long (ns) before it is read for the record to
vouch for it: two ticks of a 100 Hz filesystem clock."""

Stamp = tuple[int, int, int, int]
"""(size in bytes, mtime ns, ctime ns, inode) of one file."""


def stamp_of(path: Path) -> Stamp:
    """The file's figures; OSError if it cannot be read."""
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@dataclass(frozen=True)
class VerificationRecord:
    """What one full verification found unchanged and correct."""

    manifest_sha256: str
    read_at_ns: int
    """time.time_ns() before the files were read."""
    files: dict[str, Stamp] = field(default_factory=dict)

    def vouches_for(self, rel: str, stamp: Stamp) -> bool:
        """``rel`` hashed correctly and has not changed since (by its figures)."""
        return self.files.get(rel) == stamp and stamp[2] < self.read_at_ns - SLACK_NS


def read_record(tag_dir: Path, manifest_sha256: str) -> VerificationRecord | None:
    """The tag's record if it is for this manifest; None if absent, unreadable or stale."""
    try:
        raw = json.loads((tag_dir / RECORD_NAME).read_bytes())
        if raw.get("format") != RECORD_FORMAT or raw.get("manifest_sha256") != manifest_sha256:
            return None
        files = {str(rel): (int(s[0]), int(s[1]), int(s[2]), int(s[3])) for rel, s in raw["files"].items()}
        return VerificationRecord(manifest_sha256, int(raw["read_at_ns"]), files)
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def write_record(tag_dir: Path, record: VerificationRecord) -> None:
    """Replace the tag's record (temp file + os.replace); a failure only costs a re-hash."""
    document = {
        "format": RECORD_FORMAT,
        "manifest_sha256": record.manifest_sha256,
        "read_at_ns": record.read_at_ns,
        "files": {rel: list(stamp) for rel, stamp in sorted(record.files.items())},
    }
    temp = tag_dir / f".{RECORD_NAME}.{os.getpid()}.tmp"
    try:
        temp.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
        os.replace(temp, tag_dir / RECORD_NAME)
    except OSError as err:  # a read-only or vanished tag: the next resume hashes again
        log.info("could not record the verification of %s: %s", tag_dir.name, err)
        temp.unlink(missing_ok=True)


def settle(stamps: Iterable[Stamp], sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait until every file was last changed ``SLACK_NS`` ago (at most that long: only a
    tag just written waits); returns time.time_ns() afterwards, the record's ``read_at_ns``."""
    newest = max((stamp[2] for stamp in stamps), default=0)
    now = time.time_ns()
    if now - newest <= SLACK_NS:
        sleep(min(SLACK_NS, newest + SLACK_NS - now + 1) / 1e9)
        now = time.time_ns()
    return now
