"""Who may read a run's files: every path under a directory whose mode lets anyone but its
owner in (group or other bits set), for the "private by default" tests."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def loose_modes(root: Path) -> list[str]:
    """``"<path> <mode>"`` for ``root`` and everything under it with a group or other bit
    set (links are not followed). Empty: every file 0600 or stricter, every dir 0700 or stricter."""
    loose = []
    for dirpath, dirnames, filenames in os.walk(root):
        for path in [Path(dirpath)] + [Path(dirpath) / name for name in [*dirnames, *filenames]]:
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                loose.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)} ({mode & 0o777:04o})")
    return sorted(set(loose))
