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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT: Literal[1] = 1
HASH_CHUNK = 1 << 20  # bytes read per hashing call


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
    """RNG states (python, torch CPU, CUDA per device) as JSON-safe values."""
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


def describe_files(tag_dir: Path) -> dict[str, FileEntry]:
    """Size and sha256 of every file under ``tag_dir`` except the manifest."""
    entries: dict[str, FileEntry] = {}
    for dirpath, _dirs, names in os.walk(tag_dir):
        for name in names:
            path = Path(dirpath) / name
            rel = path.relative_to(tag_dir).as_posix()
            if rel == MANIFEST_NAME:
                continue
            entries[rel] = FileEntry(size=path.stat().st_size, sha256=hash_file(path))
    return dict(sorted(entries.items()))


def read_manifest(tag_dir: Path) -> Manifest:
    """The tag's manifest; OSError or ValueError (with a reason) if it cannot be read."""
    raw = (tag_dir / MANIFEST_NAME).read_bytes()
    try:
        return Manifest.model_validate_json(raw)
    except ValidationError as err:
        raise ValueError(f"manifest is not valid: {err.errors()[0]['msg']}") from None


# ------------------------------------------------------------------- verification

Check = Literal["full", "quick"]
"""full: sizes and sha256 of every file; quick: manifest and sizes only (no reading data)."""


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

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify_tag(tag_dir: Path, step: int, check: Check = "full") -> Verdict:
    """Check ``tag_dir`` (which should hold checkpoint ``step``) against its manifest."""

    def verdict(problem: str | None, manifest: Manifest | None = None) -> Verdict:
        return Verdict(tag_dir.name, step, tag_dir, problem, manifest, check)

    if not (tag_dir / MANIFEST_NAME).is_file():
        return verdict(f"half-written: no {MANIFEST_NAME}")
    try:
        manifest = read_manifest(tag_dir)
    except (OSError, ValueError) as err:
        return verdict(f"{MANIFEST_NAME} unreadable: {err}")
    if manifest.step != step:
        return verdict(f"{MANIFEST_NAME} says step {manifest.step}, the tag says {step}", manifest)
    for rel, entry in manifest.files.items():
        problem = _file_problem(tag_dir / rel, rel, entry, check)
        if problem is not None:
            return verdict(problem, manifest)
    return verdict(None, manifest)


def _file_problem(path: Path, rel: str, entry: FileEntry, check: Check) -> str | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"missing file {rel}"
    except OSError as err:
        return f"unreadable file {rel}: {err.strerror}"
    if size != entry.size:
        return (
            f"truncated file {rel}: {size} of {entry.size} bytes"
            if size < entry.size
            else (f"wrong size of {rel}: {size} bytes, the manifest says {entry.size}")
        )
    if check == "full":
        try:
            digest = hash_file(path)
        except OSError as err:
            return f"unreadable file {rel}: {err.strerror}"
        if digest != entry.sha256:
            return f"checksum mismatch in {rel} (sha256 {digest[:12]}..., expected {entry.sha256[:12]}...)"
    return None
