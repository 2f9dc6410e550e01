"""The trainer's steady host heap: with glibc's thresholds fixed, a window of tensors freed
at the end of one step is reused by the next instead of trimmed away and faulted in again
(what cost a run ~3 % on the CPU, engine/trainer/memory/host_heap.py); the user's settings win."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from pathlib import Path

import pytest

from engine.trainer.memory.host_heap import steady_host_heap, user_tuned

ROOT = Path(__file__).resolve().parents[2]

# A step's worth of 1 MiB blocks, written and freed, ten times: the child prints the page
# faults of the last ten (after three to settle).
WINDOWS = """
import ctypes, resource, sys
sys.path.insert(0, sys.argv[2])
from engine.trainer.memory.host_heap import steady_host_heap
if sys.argv[1] == "steady":
    assert steady_host_heap({})
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def window():
    blocks = [libc.malloc(1 << 20) for _ in range(24)]
    for b in blocks:
        libc.memset(b, 1, 1 << 20)
    for b in blocks:
        libc.free(b)
for _ in range(3):
    window()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    window()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc = pytest.mark.skipif(
    sys.platform != "linux" or ctypes.util.find_library("c") is None, reason="glibc's malloc only"
)


def faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", WINDOWS, mode, str(ROOT)], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


@pytest.mark.slow
@glibc
def test_a_freed_window_is_reused_not_faulted_in_again() -> None:
    assert faults("default") > 10 * 24 * 256 // 2  # glibc's moving thresholds: trimmed, re-faulted
    assert faults("steady") < 24 * 256  # fixed thresholds: under one window's pages in ten


def test_the_users_malloc_settings_win() -> None:
    assert user_tuned({"MALLOC_TRIM_THRESHOLD_": "0"}) and user_tuned({"GLIBC_TUNABLES": "glibc.malloc.x=1"})
    assert not user_tuned({"MALLOC_ARENA_MAX": "2"})
    assert steady_host_heap({"MALLOC_MMAP_THRESHOLD_": "131072"}) is False
