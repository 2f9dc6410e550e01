"""What a trainer says while no supervisor hears it: ``spool/trainer-<attempt>.ndjson``.

The supervisor stores a step within half a second of receiving it and an event at once;
when it dies, what it had not stored yet (and what was still in the socket) is gone, and
the trainer, which goes on to the end of its step, its final save and its exit, reports
into a closed socket. So the trainer's link keeps the last ``RECENT_LINES`` lines it sent
and, once the supervisor is gone, writes those and every later line to its spool file
(one NDJSON line each, the wire's own encoding). The next supervisor reads every spool
before it serves anyone, stores what the store lacks, in order, and removes the file.

Both sides use this module; it knows files and lines only (no protocol). Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from engine.run.directory import PRIVATE_DIR, PRIVATE_FILE, RunDir

RECENT_LINES = 2048
"""Lines the link keeps after sending them: more than a supervisor can hold unstored
(a flush every 0.5 s, a socket buffer) at hundreds of steps a second."""
SPOOL_NAME = re.compile(r"trainer-(\d+)\.ndjson")


def spool_dir(run: RunDir) -> Path:
    return run.path / "spool"


def spool_path(run: RunDir, attempt: int) -> Path:
    return spool_dir(run) / f"trainer-{attempt}.ndjson"


class SpoolWriter:
    """Appends whole lines to one attempt's spool (created 0600 on the first line)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def write(self, lines: list[bytes]) -> None:
        """Append ``lines`` (each ends with a newline); an error is raised to the caller."""
        if self._fd is None:
            self.path.parent.mkdir(mode=PRIVATE_DIR, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
        os.write(self._fd, b"".join(lines))

    def close(self) -> None:
        """Make what was written durable and close the file."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(fd)
            os.close(fd)


def spools(run: RunDir) -> list[tuple[int, Path]]:
    """Every spool file of the run as (attempt, path), oldest attempt first."""
    try:
        names = os.listdir(spool_dir(run))
    except OSError:
        return []
    found = [(int(m.group(1)), spool_dir(run) / n) for n in names if (m := SPOOL_NAME.fullmatch(n))]
    return sorted(found)


def spool_lines(path: Path) -> list[bytes]:
    """The complete lines of a spool (a last line cut short by a crash is left out)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return [line for line in data.split(b"\n")[:-1] if line.strip()]
