"""Who serves a run: one supervisor at a time, held by the operating system.

The supervisor that serves a run holds an exclusive ``flock`` on ``supervisor.lock`` in the
run directory for its whole life. The kernel drops the lock when that process ends, however
it ends (SIGKILL included), so a lock is never stale and needs no clean-up; a second
supervisor's non-blocking attempt fails at once, before it has written anything. The lock
file names its owner (the pid, written once the lock is held and cleared before it is let
go) so that a refused supervisor and the CLI can say who serves the run. ``supervisor.pid``
is written after the lock is held and removed before it is let go: information for tools
that read it, never the lock itself.

The lock file is never removed: a supervisor that removed it on its way out could let the
next two each lock a file of their own. Its descriptor is close-on-exec, so no trainer or
command the supervisor starts keeps the run locked after the supervisor is gone.
Torch-free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time

from engine.run.directory import PRIVATE_FILE, RunDir, pid_alive
from engine.run.durable_file import replace_atomically

OWNER_WAIT_S = 1.0  # s a refused supervisor waits for the owner to name itself (microseconds, usually)
OWNER_POLL_S = 0.01  # s between two readings of the lock file meanwhile


class OwnershipRefused(RuntimeError):
    """This process cannot serve the run: ``owner`` does (None when it has not said who it is
    yet), or the lock or pid file cannot be written (the message says which, and why)."""

    def __init__(self, message: str, owner: int | None = None) -> None:
        super().__init__(message)
        self.owner = owner


class Ownership:
    """This process's hold on one run directory: ``Ownership.take(run)``, then ``release()``."""

    def __init__(self, run: RunDir, fd: int) -> None:
        self.run = run
        self.pid = os.getpid()
        self._fd: int | None = fd  # the locked descriptor; None once released

    @classmethod
    def take(cls, run: RunDir) -> Ownership:
        """Lock the run, then write our pid into the lock file and ``supervisor.pid``.

        Raises OwnershipRefused naming the owner if another process holds the run (nothing
        of the run is touched then, beyond opening its lock file), or saying what could not
        be written."""
        try:
            fd = os.open(run.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
        except OSError as err:
            raise OwnershipRefused(f"cannot open {run.lock_file}: {err.strerror or err}") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if isinstance(err, BlockingIOError):
                owner = _wait_for_owner(run)
                raise OwnershipRefused(served_by(run, owner), owner) from None
            raise OwnershipRefused(f"cannot lock {run.lock_file}: {err.strerror or err}") from err
        ownership = cls(run, fd)
        try:
            ownership._name_owner()
        except OwnershipRefused:
            ownership.release()
            raise
        return ownership

    def _name_owner(self) -> None:
        """Our pid into the lock file, then ``supervisor.pid``; a write the disk refuses (a full
        disk: nothing started yet, and nothing to record it in) is an OwnershipRefused."""
        assert self._fd is not None
        text = f"{self.pid}\n".encode()
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text, 0)
        except OSError as err:
            raise OwnershipRefused(f"cannot write {self.run.lock_file}: {err.strerror or err}") from err
        try:
            replace_atomically(self.run.pid_file, text)
        except OSError as err:
            raise OwnershipRefused(f"cannot write {self.run.pid_file}: {err.strerror or err}") from err

    def release(self) -> None:
        """Remove ``supervisor.pid`` (if it still names us), clear the owner, let the lock go.
        Last thing a supervisor does: the next owner may start the moment it returns."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if int(self.run.pid_file.read_text().strip()) == self.pid:
                self.run.pid_file.unlink()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        fd, self._fd = self._fd, None
        os.close(fd)  # the kernel drops the lock with its last descriptor


def recorded_owner(run: RunDir) -> int | None:
    """The pid the run's lock file names, if that process is alive: the supervisor serving
    the run, or about to (a SIGKILLed owner leaves its dead pid there, read as None)."""
    try:
        pid = int(run.lock_file.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid > 0 and pid_alive(pid) else None


def served_by(run: RunDir, owner: int | None) -> str:
    """What a refused supervisor says: the run and who serves it."""
    if owner is None:
        return f"{run.path} is already served by another supervisor (its pid not recorded yet)"
    return f"{run.path} is already served by supervisor pid {owner}"


def _wait_for_owner(run: RunDir) -> int | None:
    """The owner's pid, once it has written it (it does so right after taking the lock)."""
    deadline = time.monotonic() + OWNER_WAIT_S
    while True:
        owner = recorded_owner(run)
        if owner is not None or time.monotonic() >= deadline:
            return owner
        time.sleep(OWNER_POLL_S)
