"""How little free disk is too little, relative to the disk's size, and how to say it.

A fixed threshold (2 GiB) calls a small disk (a 40 MB tmpfs, a test volume) full while it
is mostly empty; a pure fraction lets a huge disk run down to gigabytes that one save
needs. A threshold is therefore a fraction of the disk's size, capped at an absolute
figure for large disks and never below an absolute floor (a store and its logs need a
few MiB whatever the disk). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class FreeSpaceThreshold:
    fraction: float
    """Of the disk's total size."""
    cap_bytes: int
    """The most it asks for (a large disk)."""
    floor_bytes: int
    """The least it asks for (a small disk)."""

    def bytes_for(self, total_bytes: int | None) -> int:
        """The threshold on a disk of ``total_bytes`` (None: unknown size, the cap)."""
        if total_bytes is None:
            return self.cap_bytes
        return max(self.floor_bytes, min(self.cap_bytes, int(self.fraction * total_bytes)))


RESERVE_SHARE = 0.05
"""Of a disk's size: the most a configured free reserve asks of a small disk."""
RESERVE_FLOOR = 16 * MiB
"""The least it asks (a store and its logs), unless the configured reserve is smaller."""


def reserve_bytes(configured: int, total_bytes: int | None) -> int:
    """A configured free-space reserve (``alerts.disk_min_free_mb``: 1 GiB by default) on a
    disk of ``total_bytes``: as configured on a large disk, a share of a small one."""
    floor = min(configured, RESERVE_FLOOR)
    return FreeSpaceThreshold(RESERVE_SHARE, configured, floor).bytes_for(total_bytes)


def byte_size(n: int) -> str:
    """``35.0 MiB``, ``1.2 GiB``: MiB below a GiB (a small disk's figures are not 0.0 GiB)."""
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB"
