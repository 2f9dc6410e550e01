"""Which failures of the run's files are storage faults: a disk that is full or failing.

A storage fault is a state the run goes through, not a bug in it: the disk fills up (the
run's own checkpoints, another user's files), a quota is reached, a network or failing
disk returns I/O errors. Once room returns, or the disk recovers, the same write succeeds.
Everything else (a locked or corrupt database, a programming error) is not one and is
left to raise as before.

* SQLite: ``SQLITE_FULL`` ("database or disk is full", also what ``PRAGMA
  max_page_count`` gives) and ``SQLITE_IOERR`` with any of its extended codes ("disk I/O
  error"). Python 3.11+ carries the code on the exception (``sqlite_errorcode``); before
  that only the message tells, so the two messages SQLite uses for them are matched too.
* The OS: ``ENOSPC`` (no space), ``EDQUOT`` (quota), ``EFBIG`` (a file-size limit) and
  ``EIO`` (the device failed), on any ``OSError``.

Torch-free; no I/O.
"""

from __future__ import annotations

import errno
import sqlite3

SQLITE_IOERR = 10
"""Primary result code of every I/O error; extended codes keep it in their low byte."""
SQLITE_FULL = 13
FAULT_SQLITE_CODES: frozenset[int] = frozenset({SQLITE_IOERR, SQLITE_FULL})
FAULT_SQLITE_MESSAGES: tuple[str, ...] = ("database or disk is full", "disk i/o error")
"""What SQLite says for those codes (the only sign before Python 3.11)."""
FAULT_ERRNOS: frozenset[int] = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def storage_fault(err: BaseException) -> str | None:
    """Why ``err`` is a storage fault, in a few words for people (``database or disk is
    full (SQLITE_FULL)``, ``[Errno 28] No space left on device``); None if it is not one."""
    if isinstance(err, sqlite3.Error):
        return _sqlite_fault(err)
    if isinstance(err, OSError) and err.errno in FAULT_ERRNOS:
        return f"[Errno {err.errno}] {err.strerror or errno.errorcode.get(err.errno, '')}".rstrip()
    return None


def is_storage_fault(err: BaseException) -> bool:
    return storage_fault(err) is not None


def _sqlite_fault(err: sqlite3.Error) -> str | None:
    text = str(err)
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        if code & 0xFF not in FAULT_SQLITE_CODES:
            return None
        name = getattr(err, "sqlite_errorname", None) or f"code {code}"
        return f"{text} ({name})"
    return text if text.lower().startswith(FAULT_SQLITE_MESSAGES) else None
