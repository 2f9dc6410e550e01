"""A steady host heap for training on the CPU: glibc's malloc set so that the tensors a step
frees are reused by the next step instead of handed back to the OS and faulted in again.

glibc serves allocations above ``M_MMAP_THRESHOLD`` with their own ``mmap`` and trims the top
of the heap once more than ``M_TRIM_THRESHOLD`` of it is free. Both thresholds move by
themselves (each freed ``mmap`` chunk up to 32 MiB raises them), so two identical runs can
end in different states depending on what they allocated first. Seen on the 2-core machine
(bench/budget_runs.py, wide setup, micro-batch 16): a run that came down to 16 from 32 kept
re-faulting ~14,500 pages (57 MB) per step and ran ~3 % slower than one that came from 64,
which faulted none. Fixed thresholds give every run the second state.

Set once at trainer start on a CPU-only host; the user's own ``MALLOC_*`` settings or
``GLIBC_TUNABLES`` win, and elsewhere (no glibc, a GPU host) nothing changes. The explicit
``malloc_trim`` after an OOM or a shrink (``oom_recovery.release_memory``) still returns
what the larger micro-batch left, so the RSS (the CPU's memory stand-in) drops then.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # bytes: glibc's own ceiling for the moving threshold (64-bit)
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # bytes: what glibc pairs with that threshold
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def user_tuned(environ: Mapping[str, str]) -> bool:
    """True when the user set glibc's malloc thresholds themselves."""
    return any(environ.get(name) for name in USER_SETTINGS)


def steady_host_heap(environ: Mapping[str, str] = os.environ) -> bool:
    """Fix glibc's mmap and trim thresholds (see the module's docstring); True if set."""
    if user_tuned(environ):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        done = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(
            M_TRIM_THRESHOLD, TRIM_THRESHOLD
        )
    except (OSError, AttributeError):  # no glibc (musl, macOS): its allocator is left as it is
        return False
    if not done:
        log.warning("glibc refused the malloc thresholds: the host heap is left as it is")
    return bool(done)
