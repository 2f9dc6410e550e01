"""A trainer command whose first attempt dies as a rank does when its peer on another node
vanished; every later attempt is the command it wraps.

    python tests/fakes/peer_lost_once.py PROGRAM ARGS... RUN_DIR --attempt N

Attempt 1 exits 1 at once; attempt N > 1 replaces itself with ``python PROGRAM ARGS...
RUN_DIR --attempt N`` (the same pid: the supervisor's launcher is that command's).
"""

from __future__ import annotations

import os
import sys

PEER_LOST_EXIT = 1


def main(argv: list[str]) -> int:
    attempt = int(argv[argv.index("--attempt") + 1])
    if attempt == 1:
        print("peer on node 1 gone: exiting", flush=True)
        return PEER_LOST_EXIT
    os.execv(sys.executable, [sys.executable, *argv])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
