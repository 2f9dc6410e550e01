"""The supervisor's log lines, written to a file that may refuse them (a full disk).

The detached supervisor's stdout is ``logs/supervisor.log``. A write that fails there
must cost the line, never the run: ``LogOutput`` (a ``logging`` handler) counts the lines
the stream refused, and the first line that gets through again is preceded by one that
says how many were lost and why. (``logging``'s own handling would try to print a
traceback per line to stderr, the same full file.) Torch-free.
"""

from __future__ import annotations

import logging
from typing import TextIO

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogOutput(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that survives a stream refusing writes, and says what it lost."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.lost = 0
        """Lines the stream refused since the last one it took."""
        self.lost_reason = ""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)  # a bad format string: logging's usual report
            return
        if self.lost:
            line = f"({self.lost} log lines before this one were lost: {self.lost_reason})\n{line}"
        try:
            self.stream.write(line)
            self.flush()
        except (OSError, ValueError) as err:  # ENOSPC, EIO; ValueError: a closed stream
            self.lost += 1
            self.lost_reason = str(err)
            return
        self.lost = 0


def log_to(stream: TextIO, level: int = logging.INFO) -> LogOutput:
    """Send the root logger's lines to ``stream`` through a ``LogOutput``."""
    handler = LogOutput(stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    return handler
