"""A fake checkpoint writer for the torch-free store tests: it fills the staging directory
as DeepSpeed's save_checkpoint would (a model file of random bytes, an optimizer file)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

FIELDS = {"samples": 0, "config_hash": "c" * 64, "micro_batch": 8, "grad_accum": 1}
"""Manifest fields a save needs beyond tag, step, created_at and files."""


def writer(directory: Path, step: int, size: int = 4096) -> Callable[[str], None]:
    """Writes ``size`` + 512 bytes into ``directory/<staging>``."""

    def write(staging: str) -> None:
        (directory / staging).mkdir()
        (directory / staging / "mp_rank_00_model_states.pt").write_bytes(os.urandom(size))
        (directory / staging / "optim.pt").write_bytes(step.to_bytes(8, "little") * 64)

    return write
