"""Who is on the other end of a Unix socket, and whether they may talk to the run.

The socket is 0600 in a 0700 directory; the peer-credential check is the second lock
(root, a shared group dir, a leaked fd). Linux ``SO_PEERCRED``. Torch-free.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from typing import Any

_UCRED = struct.Struct("3i")  # struct ucred: pid_t pid, uid_t uid, gid_t gid


@dataclass(frozen=True)
class PeerCredentials:
    pid: int
    uid: int
    gid: int


def peer_credentials(sock: socket.socket | Any) -> PeerCredentials | None:
    """The connected peer's pid/uid/gid, or None where the platform cannot say."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # pragma: no cover - not Linux
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid, uid, gid)


def refusal(creds: PeerCredentials | None, owner_uid: int | None = None) -> str | None:
    """Why this peer may not connect, or None if it may: only the run's owner may."""
    owner = os.getuid() if owner_uid is None else owner_uid
    if creds is None:
        return None  # no SO_PEERCRED here: the 0600 socket in a 0700 dir is the lock
    if creds.uid != owner:
        return f"refused: peer uid {creds.uid} (pid {creds.pid}) is not the run's owner (uid {owner})"
    return None
