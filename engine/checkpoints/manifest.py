"""The manifest of one checkpoint tag, and checking a tag on disk against it.

``<tag>/manifest.json`` is written last, after every file of the tag is fsynced: a tag
without one is half-written by definition. It names every file with its size and sha256,
plus what a resume needs that DeepSpeed does not restore (data position, RNG, batch
geometry, applied directives). Torch-free: the supervisor and ``memtui checkpoints`` read
it too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.checkpoints.verification_record import (
    RECORD_NAME,
    Stamp,
    VerificationRecord,
    read_record,
    settle,
    stamp_of,
    write_record,
)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT: Literal[1] = 1
HASH_CHUNK = 1 << 20  # bytes read per hashing call (hashlib lets go of the GIL for it)
HASH_WORKERS = max(1, min(8, os.cpu_count() or 1))
"""Files hashed at once: the disk and the cores both serve several readers."""


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=0)
    """Bytes."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(BaseModel):
    """What a committed checkpoint holds and how to check it."""

    model_config = ConfigDict(extra="forbid")

    format: Literal[1] = MANIFEST_FORMAT
    tag: str
    step: int = Field(ge=0)
    """Optimizer steps completed; also the data position (the next step draws batch(step, ...))."""
    samples: int = Field(ge=0)
    """Samples consumed so far over all ranks."""
    created_at: float
    """Unix time the manifest was written."""
    config_hash: str
    """sha256 of the run config (canonical JSON) the checkpoint was trained with."""
    data_position: dict[str, int] = Field(default_factory=dict)
    """Where the data stream stands: ``step`` and ``samples``."""
    rng: dict[str, Any] = Field(default_factory=dict)
    """Rank 0's RNG states (python, torch CPU, CUDA per device) as JSON-safe values."""
    rank_rng: list[dict[str, Any]] = Field(default_factory=list)
    """Every rank's RNG states, in rank order (empty in checkpoints written before)."""
    micro_batch: int = Field(ge=1)
    grad_accum: int = Field(ge=1)
    world_size: int = Field(1, ge=1)
    directives: list[dict[str, Any]] = Field(default_factory=list)
    """Applied directive values to re-apply after a load (a ZeRO load overwrites some)."""
    files: dict[str, FileEntry]
    """Every file of the tag but the manifest, by path relative to the tag directory."""

    @property
    def size_bytes(self) -> int:
        return sum(entry.size for entry in self.files.values())


def config_hash(config_json: dict[str, Any]) -> str:
    """sha256 of a config dict as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(config_json, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def hashes(paths: list[Path]) -> Generator[tuple[Path, str | OSError], None, None]:
    """sha256 of each file, on ``HASH_WORKERS`` threads, largest first, as each ends (an
    unreadable one gives its OSError). Closing the iterator early cancels the rest."""
    if len(paths) <= 1 or HASH_WORKERS == 1:  # nothing to share: no threads
        for path in paths:
            try:
                yield path, hash_file(path)
            except OSError as err:
                yield path, err
        return
    ordered = sorted(paths, key=lambda p: p.stat().st_size if p.exists() else 0, reverse=True)
    pool = ThreadPoolExecutor(min(HASH_WORKERS, len(ordered)), thread_name_prefix="sha256")
    try:
        futures = {pool.submit(hash_file, path): path for path in ordered}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], error if isinstance(error, OSError) else future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def describe_files(tag_dir: Path) -> dict[str, FileEntry]:
    """Size and sha256 of every file under ``tag_dir`` except the manifest (and a record)."""
    paths = [
        Path(dirpath) / name
        for dirpath, _dirs, names in os.walk(tag_dir)
        for name in names
        if (Path(dirpath) / name).relative_to(tag_dir).as_posix() not in (MANIFEST_NAME, RECORD_NAME)
    ]
    entries: dict[str, FileEntry] = {}
    for path, digest in hashes(paths):
        if isinstance(digest, OSError):
            raise digest
        entries[path.relative_to(tag_dir).as_posix()] = FileEntry(size=path.stat().st_size, sha256=digest)
    return dict(sorted(entries.items()))


def read_manifest(tag_dir: Path) -> Manifest:
    """The tag's manifest; OSError or ValueError (with a reason) if it cannot be read."""
    return _parsed((tag_dir / MANIFEST_NAME).read_bytes())


def _parsed(raw: bytes) -> Manifest:
    try:
        return Manifest.model_validate_json(raw)
    except ValidationError as err:
        raise ValueError(f"manifest is not valid: {err.errors()[0]['msg']}") from None


# ------------------------------------------------------------------- verification

Check = Literal["full", "quick"]
"""full: sizes and sha256 of every file; quick: manifest and sizes only (no reading data)."""
RecordUse = Literal["ignore", "read", "update"]
"""A full check and the tag's verification record (engine.checkpoints.verification_record):
``ignore`` hashes every file; ``read`` only those the record does not vouch for; ``update``
does so and records what it found correct (the trainer's, after a seal and on resume)."""


@dataclass(frozen=True)
class Verdict:
    """One tag directory checked against its manifest."""

    tag: str
    step: int
    path: Path
    problem: str | None
    """None if it verified; else one line naming the file and what is wrong with it."""
    manifest: Manifest | None = None
    check: Check = "full"
    hashed_bytes: int = 0
    """Bytes read to hash (a full check of files its record did not vouch for)."""

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify_tag(tag_dir: Path, step: int, check: Check = "full", record: RecordUse = "ignore") -> Verdict:
    """Check ``tag_dir`` (which should hold checkpoint ``step``) against its manifest: every
    file's size first (a missing or truncated file is found without reading any), then, for
    a full check, the sha256 of those the record (``record``) does not vouch for, in parallel."""

    def verdict(problem: str | None, manifest: Manifest | None = None, hashed: int = 0) -> Verdict:
        return Verdict(tag_dir.name, step, tag_dir, problem, manifest, check, hashed)

    if not (tag_dir / MANIFEST_NAME).is_file():
        return verdict(f"half-written: no {MANIFEST_NAME}")
    try:
        raw = (tag_dir / MANIFEST_NAME).read_bytes()
        manifest = _parsed(raw)
    except (OSError, ValueError) as err:
        return verdict(f"{MANIFEST_NAME} unreadable: {err}")
    if manifest.step != step:
        return verdict(f"{MANIFEST_NAME} says step {manifest.step}, the tag says {step}", manifest)
    stamps: dict[str, Stamp] = {}
    for rel, entry in manifest.files.items():
        found = _stamp(tag_dir / rel, rel, entry)
        if isinstance(found, str):
            return verdict(found, manifest)
        stamps[rel] = found
    if check == "quick":
        return verdict(None, manifest)
    manifest_sha = hashlib.sha256(raw).hexdigest()
    known = read_record(tag_dir, manifest_sha) if record != "ignore" else None
    todo = [rel for rel, stamp in stamps.items() if known is None or not known.vouches_for(rel, stamp)]
    read_at_ns = settle(stamps[rel] for rel in todo) if record == "update" and todo else 0
    problem = _hash_problem(tag_dir, {rel: manifest.files[rel] for rel in todo})
    if problem is None and record == "update" and todo:
        _remember(tag_dir, VerificationRecord(manifest_sha, read_at_ns, stamps))
    return verdict(problem, manifest, sum(manifest.files[rel].size for rel in todo))


def _stamp(path: Path, rel: str, entry: FileEntry) -> Stamp | str:
    """The file's figures, or what is wrong with its size."""
    try:
        stamp = stamp_of(path)
    except FileNotFoundError:
        return f"missing file {rel}"
    except OSError as err:
        return f"unreadable file {rel}: {err.strerror}"
    size = stamp[0]
    if size < entry.size:
        return f"truncated file {rel}: {size} of {entry.size} bytes"
    if size > entry.size:
        return f"wrong size of {rel}: {size} bytes, the manifest says {entry.size}"
    return stamp


def _hash_problem(tag_dir: Path, entries: dict[str, FileEntry]) -> str | None:
    """What is wrong with the first file found whose sha256 is not the manifest's (the
    others still being hashed are cancelled); None: all match."""
    with closing(hashes([tag_dir / rel for rel in entries])) as found:
        for path, digest in found:
            rel = path.relative_to(tag_dir).as_posix()
            if isinstance(digest, OSError):
                return f"unreadable file {rel}: {digest.strerror}"
            expected = entries[rel].sha256
            if digest != expected:
                return f"checksum mismatch in {rel} (sha256 {digest[:12]}..., expected {expected[:12]}...)"
    return None


def _remember(tag_dir: Path, record: VerificationRecord) -> None:
    """Record the verification unless a file changed while it was read."""
    try:
        unchanged = all(stamp_of(tag_dir / rel) == stamp for rel, stamp in record.files.items())
    except OSError:
        return
    if unchanged:
        write_record(tag_dir, record)
