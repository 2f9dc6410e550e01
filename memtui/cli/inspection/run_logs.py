"""A run's log files for ``memtui logs``: pick one, print its tail, follow it (all of them
merged: ``memtui.cli.inspection.merged_logs``)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TextIO

from engine.run.directory import RunDir

LogKind = Literal["trainer", "supervisor", "auto", "all"]
"""``all``: every log merged (``memtui.cli.inspection.merged_logs``); ``auto``: the trainer's,
else the supervisor's."""
FOLLOW_POLL_S = 0.2
TAIL_READ_BYTES = 1 << 20
"""Most bytes read from the end of a log to find its last lines."""
_ATTEMPT = re.compile(r"^trainer-(\d+)\.log$")


def trainer_logs(run: RunDir) -> list[tuple[int, Path]]:
    """(attempt, path) of every trainer log, oldest attempt first."""
    return sorted(
        (int(m.group(1)), p) for p in run.logs.glob("trainer-*.log") if (m := _ATTEMPT.match(p.name))
    )


def newest_trainer_log(run: RunDir) -> Path | None:
    logs = trainer_logs(run)
    return logs[-1][1] if logs else None


def pick_log(run: RunDir, kind: LogKind) -> Path:
    """The newest attempt's trainer log, the supervisor log, or (auto) the first that exists."""
    if kind == "supervisor":
        return run.supervisor_log
    trainer = newest_trainer_log(run)
    if trainer is not None:
        return trainer
    if kind == "trainer":
        raise FileNotFoundError(f"no trainer log yet in {run.logs}")
    return run.supervisor_log


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of ``path`` (without newlines)."""
    if n <= 0:
        return []
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - TAIL_READ_BYTES))
        text = f.read().decode("utf-8", "replace")
    return text.splitlines()[-n:]


def follow(path: Path, out: TextIO, *, alive: Callable[[], bool], poll_s: float = FOLLOW_POLL_S) -> None:
    """Copy what is appended to ``path`` to ``out`` until ``alive()`` is False and nothing is left."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        while True:
            chunk = f.read()
            if chunk:
                out.write(chunk.decode("utf-8", "replace"))
                out.flush()
                continue
            if not alive():
                out.write(f.read().decode("utf-8", "replace"))
                return
            time.sleep(poll_s)


def diagnosis_note(run: RunDir) -> str | None:
    """The hang diagnosis files kept beside the logs (one stack dump per rank and collection,
    NCCL flight records), named relative to the run directory; None when there are none."""
    from engine.run.stack_files import diagnosis_files

    files = diagnosis_files(run.path)
    if not files:
        return None
    names = "\n".join(f"  {os.path.relpath(p, run.path)}" for p in files)
    return f"stacks and flight records (hang diagnosis) in {run.path}:\n{names}"
