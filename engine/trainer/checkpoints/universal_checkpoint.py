"""Resuming at another world size: DeepSpeed's universal checkpoint conversion.

A ZeRO (stage 1-3) checkpoint partitions the optimizer states by rank, and DeepSpeed refuses
to load it at another data-parallel world size. DeepSpeed's own converter
(``python -m deepspeed.checkpoint.ds_to_universal``) rewrites a tag as one file per parameter
(fp32 weights and optimizer moments, unpartitioned), which loads at any world size with the
``checkpoint.load_universal`` switch. So, when the chosen tag was written by another number
of ranks, rank 0 converts it into ``checkpoints/universal/TAG``, every rank loads that, and
the conversion is removed: the next save is an ordinary checkpoint at the new world size.
Without ZeRO (stage 0) every rank holds the whole optimizer state and no conversion is needed.

If the conversion fails, the error says how to convert by hand or where to resume instead.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

UNIVERSAL_DIR = "universal"
CONVERT_TIMEOUT_S = 1800.0
"""Seconds for the converter (it reads and writes every parameter once)."""


class UniversalConversionFailed(RuntimeError):
    """The tag could not be converted: the message says what to do instead."""

    restartable = False  # a restart would try the same conversion again


def partitioned(tag_dir: Path) -> bool:
    """True when ``tag_dir`` holds ZeRO-partitioned optimizer states (stage 1-3)."""
    return any(tag_dir.glob("zero_pp_rank_*_optim_states.pt"))


def convert_command(tag_dir: Path, out_dir: Path) -> list[str]:
    """DeepSpeed's converter; ``--inject_missing_state``: our models carry no
    Megatron-style ``universal_checkpoint_info`` (plain data parallelism needs none)."""
    return [
        sys.executable,
        "-m",
        "deepspeed.checkpoint.ds_to_universal",
        "--input_folder",
        str(tag_dir),
        "--output_folder",
        str(out_dir),
        "--inject_missing_state",
        "--num_extract_workers",
        "1",
        "--num_merge_workers",
        "1",
    ]


def convert(tag_dir: Path, saved_world: int, world: int) -> Path:
    """Convert ``tag_dir`` into ``checkpoints/universal/TAG``; returns that directory."""
    out_dir = tag_dir.parent / UNIVERSAL_DIR / tag_dir.name
    shutil.rmtree(out_dir, ignore_errors=True)  # a conversion a crash cut short
    command = convert_command(tag_dir, out_dir)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S)
        failed = None if done.returncode == 0 else (done.stderr or done.stdout).strip().splitlines()[-1:]
    except (OSError, subprocess.TimeoutExpired) as err:
        failed = [str(err)]
    if failed is not None or not (out_dir / "zero").is_dir():
        raise UniversalConversionFailed(
            f"{tag_dir.name} was written by {saved_world} ranks and this attempt has {world}: converting it "
            f"to a universal checkpoint failed ({' '.join(failed or ['no zero/ folder written'])}). "
            f"Resume with {saved_world} ranks, or convert by hand: {' '.join(command[1:])}"
        )
    return out_dir


def load_universal(engine: Any, out_dir: Path) -> tuple[Any, Any]:
    """Load the converted tag at this world size, then switch universal loading off again."""
    config = engine._config  # DeepSpeed reads the switch at load time (engine.load_universal_checkpoint)
    config.load_universal_checkpoint = True
    try:
        return engine.load_checkpoint(str(out_dir.parent), tag=out_dir.name)
    finally:
        config.load_universal_checkpoint = False


def remove(out_dir: Path) -> None:
    """The converted tag, the converter's ``latest_universal`` pointer beside it, and the
    ``universal/`` directory when nothing else is left in it."""
    shutil.rmtree(out_dir, ignore_errors=True)
    parent = out_dir.parent
    (parent / "latest_universal").unlink(missing_ok=True)
    if parent.name == UNIVERSAL_DIR and not any(parent.iterdir()):
        parent.rmdir()
