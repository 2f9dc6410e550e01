"""Where a hung run's diagnosis lives: every rank's Python stacks and NCCL's flight record.

::

    stacks/live/attempt-<A>-rank-<R>-pid-<P>.txt
                                           each rank's faulthandler writes here on
                                           STACK_DUMP_SIGNAL (opened at the rank's start)
    stacks/<UTC time>-rank<R>.txt          one collection's dump of rank R, copied out of
                                           the live file by the supervisor
    flight/nccl-trace-rank-<R>             NCCL's flight recorder dump (CUDA runs; torch
                                           appends the rank to the prefix)

Why a live file per rank rather than the attempt's log: torchrun's ranks share that log,
and faulthandler's dump carries no rank, so only a file per rank says whose stack it is.
Also the innermost frame of the training code in a dump: where that rank is. Torch-free.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import IO

STACKS_DIR = "stacks"
FLIGHT_DIR = "flight"
FLIGHT_PREFIX = "nccl-trace-rank-"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_LIBRARY = ("site-packages", "dist-packages", "/lib/python", "<frozen")
"""Frames in these paths are the libraries' (torch, DeepSpeed, the standard library)."""


def live_stack_file(run_path: Path, attempt: int, rank: int, pid: int) -> Path:
    return run_path / STACKS_DIR / "live" / f"attempt-{attempt}-rank-{rank}-pid-{pid}.txt"


def open_live_stack_file(run_path: Path, attempt: int, rank: int, pid: int) -> IO[str]:
    """The file a rank's faulthandler writes into (append, line-buffered; kept open for
    the process's life: faulthandler holds it)."""
    path = live_stack_file(run_path, attempt, rank, pid)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return open(path, "a", buffering=1)  # noqa: SIM115  (faulthandler keeps it open)


def live_stack_files(run_path: Path, attempt: int) -> dict[int, tuple[int, Path]]:
    """pid -> (its rank, its live file), for the processes of ``attempt`` that opened one."""
    found = (run_path / STACKS_DIR / "live").glob(f"attempt-{attempt}-rank-*-pid-*.txt")
    out = {}
    for path in found:
        parts = path.stem.split("-")  # attempt, A, rank, R, pid, P
        out[int(parts[5])] = (int(parts[3]), path)
    return out


def stack_record(run_path: Path, at: float, rank: int) -> Path:
    """The file one collection's dump of ``rank`` is kept in (``at``: Unix time)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))
    return run_path / STACKS_DIR / f"{stamp}-rank{rank}.txt"


def flight_prefix(run_path: Path) -> Path:
    """``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``: NCCL's flight recorder dumps to it + the rank."""
    return run_path / FLIGHT_DIR / FLIGHT_PREFIX


def diagnosis_files(run_path: Path) -> list[Path]:
    """Every kept stack dump and flight record of the run, oldest first."""
    stacks = sorted((run_path / STACKS_DIR).glob("*-rank*.txt"))
    return stacks + sorted((run_path / FLIGHT_DIR).glob(f"{FLIGHT_PREFIX}*"))


OUR_PACKAGES = ("engine", "memtui")
"""Top packages whose frames are named from the package down."""


def innermost_frame(dump: str) -> str | None:
    """Where a rank is: the innermost frame outside the libraries, ``file:line in func``
    (file relative from its package), preferring the thread that took the signal (the
    main thread's, with faulthandler's C handler). None when no such frame is there."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)
    blocks.sort(key=lambda b: not b.lstrip().startswith("Current thread"))
    frames = [m for block in blocks for m in map(_FRAME.match, block.splitlines()) if m]
    ours = [m for m in frames if not any(mark in m["file"] for mark in _LIBRARY)]
    # memtui installed into site-packages: its trainer's frames are still the training code
    ours = ours or [m for m in frames if "engine/trainer/" in m["file"]]
    if not ours:
        return None
    m = ours[0]  # most recent call first: the first one is innermost
    return f"{_short(m['file'])}:{m['line']} in {m['func']}"


def _short(path: str) -> str:
    """``/x/y/engine/trainer/ranks/rank_group.py`` -> ``engine/trainer/ranks/rank_group.py``:
    from memtui's own top package at any depth; another file (a user's workload) by its last
    three parts."""
    parts = Path(path).parts
    tops = [i for i, part in enumerate(parts[:-1]) if part in OUR_PACKAGES]
    return "/".join(parts[tops[-1] :] if tops else parts[-3:])
