"""A rank under torchrun, and a standby trainer while it waits, die with their parent.

torchrun starts every rank in a session of its own, so a SIGKILL of the launcher's process
group (the supervisor's chaos kill or stop timeout, the OOM killer, a power-loss rehearsal)
would leave the ranks running without a launcher: rank 0 would even save a checkpoint while
the supervisor starts the next attempt into the same directory. Linux's
``PR_SET_PDEATHSIG`` has the kernel SIGKILL this process when its parent exits.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def outlive_parent() -> bool:
    """Undo ``die_with_parent``: a spare trainer that becomes an attempt outlives its
    supervisor as a cold-started one does (it saves, and spools what nobody heard)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def die_with_parent(parent: int | None = None) -> bool:
    """Ask for SIGKILL when the parent exits; True if the kernel took it (Linux only).
    ``parent``: the pid the parent process had when it started this one (None: the parent
    now); if another process is the parent once the request took effect, the parent is
    already gone, and this process kills itself."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid() if parent is None else parent
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
            return False
    except (OSError, AttributeError) as err:
        log.warning("prctl unavailable: %s", err)
        return False
    if os.getppid() != parent:  # the launcher died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)
    return True
