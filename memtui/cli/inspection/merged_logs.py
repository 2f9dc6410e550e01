"""``memtui logs``' default: the supervisor's and every trainer attempt's lines, merged in time
order, each marked with the log it came from (``supervisor | ...``, ``trainer-2 | ...``).

A line's time is the stamp it begins with (``2026-11-30 19:21:33,700``, the format of memtui's
logging, or DeepSpeed's ``[2026-11-30 19:21:36,688]``). A line without one (a traceback, a
compiler's output) goes with the stamped line before it, so a traceback stays under the line
that raised it; lines at the head of a log without one go with the first stamped line after
them. Lines of equal time keep their log's order, the supervisor's first.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from engine.run.directory import RunDir
from memtui.cli.inspection.run_logs import FOLLOW_POLL_S, trainer_logs

_STAMP = re.compile(r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]?")
LABEL_WIDTH = 10
"""``supervisor`` and ``trainer-NN`` line up."""

CONTEXT_LINES = 200
"""Lines read before each log's tail for the stamp of unstamped lines at its top."""

Stamped = tuple[float, int, str]
"""(time, the log's rank in the merge, the marked line)."""


@dataclass(frozen=True)
class LogSource:
    label: str
    """``supervisor`` or ``trainer-<attempt>``."""
    path: Path
    rank: int
    """Order among logs whose lines have the same time: the supervisor's first."""


def sources(run: RunDir) -> list[LogSource]:
    """The supervisor log and every attempt's trainer log that exist, oldest attempt first."""
    found = [LogSource("supervisor", run.supervisor_log, 0)] if run.supervisor_log.exists() else []
    found += [LogSource(path.stem, path, attempt) for attempt, path in trainer_logs(run)]
    return found


def line_time(line: str) -> float | None:
    """Unix time (s, local clock) of the stamp ``line`` begins with; None without one."""
    found = _STAMP.match(line)
    if found is None:
        return None
    try:
        when = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return when.timestamp() + int(found.group(2)) / 1000


def stamp(
    source: LogSource, lines: Iterable[str], before: float | None = None, unknown: float | None = None
) -> list[Stamped]:
    """Each line with its time (``before``: the time of the line preceding these; ``unknown``:
    for lines with no stamp before or after them, the log's modification time by default)."""
    out: list[Stamped] = []
    pending: list[str] = []  # unstamped lines before the first stamp
    last = before
    for line in lines:
        when = line_time(line)
        if when is not None:
            last = when
        if last is None:
            pending.append(line)
            continue
        for early in pending:
            out.append((last, source.rank, mark(source, early)))
        pending.clear()
        out.append((last, source.rank, mark(source, line)))
    if pending:  # no stamp at all
        when = unknown if unknown is not None else _modified(source.path)
        out.extend((when, source.rank, mark(source, line)) for line in pending)
    return out


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def mark(source: LogSource, line: str) -> str:
    return f"{source.label:<{LABEL_WIDTH}} | {line}"


def merge(streams: Iterable[list[Stamped]]) -> list[str]:
    """The marked lines of every log, in time order (each log's own order kept)."""
    return [line for _, _, line in heapq.merge(*streams, key=lambda s: (s[0], s[1]))]


def merged_tail(run: RunDir, n: int, tail: Callable[[Path, int], list[str]]) -> list[str]:
    """The last ``n`` lines of the merge (each log's last ``n`` are enough to find them; a few
    more before them give a traceback at the top of its tail the stamp of its line)."""
    if n <= 0:
        return []
    return merge(stamp(source, tail(source.path, n + CONTEXT_LINES)) for source in sources(run))[-n:]


def follow_merged(
    run: RunDir, out: TextIO, *, alive: Callable[[], bool], poll_s: float = FOLLOW_POLL_S
) -> None:
    """Print what every log (a restart's new trainer log too) gains, merged per poll, until
    ``alive()`` is False and nothing is left."""
    offsets = {source.path: source.path.stat().st_size for source in sources(run)}
    last_time: dict[Path, float | None] = {}
    while True:
        going = alive()
        batch = []
        for source in sources(run):
            lines, offsets[source.path] = _new_lines(source.path, offsets.get(source.path, 0))
            stamped = stamp(source, lines, last_time.get(source.path))
            if stamped:
                last_time[source.path] = stamped[-1][0]
            batch.append(stamped)
        for line in merge(batch):
            out.write(line + "\n")
        out.flush()
        if not going:
            return
        time.sleep(poll_s)


def _new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """Complete lines appended to ``path`` after ``offset``, and the offset after them."""
    with open(path, "rb") as f:
        f.seek(offset)
        chunk = f.read()
    end = chunk.rfind(b"\n") + 1  # a line still being written waits for its newline
    return chunk[:end].decode("utf-8", "replace").splitlines(), offset + end
