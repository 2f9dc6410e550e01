"""What a node's torchrun shows of the rendezvous, seen from outside with psutil.

torchrun's static rendezvous is a TCP store on node 0's endpoint: node 0's torchrun listens
on the port and every node's torchrun (node 0's too) connects to it; node 0's waits until
all have connected, then every agent waits for the others under its rendezvous id, and
only once they agree does torchrun start its ranks (children carrying ``RANK``). So, from
this node's launcher alone: its ranks started (the nodes met); on node 0, how many
connections its store accepted (the nodes joined, itself included); on another node,
whether it is connected to node 0's port. Torch-free; our own processes, so readable.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from engine.supervisor.trainers.rank_processes import rank_processes


@dataclass(frozen=True)
class RendezvousSeen:
    """One look at a launcher's side of the rendezvous."""

    met: bool
    """torchrun started its ranks: every node came under the same id."""
    joined: int | None
    """Node 0: connections its store accepted; None: not listening yet (or not readable)."""
    reached: bool
    """Connected to the endpoint's port (any node; what matters on the others)."""


def look(launcher_pid: int, port: int) -> RendezvousSeen:
    """The rendezvous as ``launcher_pid`` (this node's torchrun) shows it for ``port``."""
    if rank_processes(launcher_pid):
        return RendezvousSeen(met=True, joined=None, reached=True)
    listening, accepted, reached = False, 0, False
    for conn in _tcp_connections(launcher_pid):
        local = conn.laddr.port if conn.laddr else None
        remote = conn.raddr.port if conn.raddr else None
        if conn.status == "LISTEN" and local == port:
            listening = True
        elif conn.status == "ESTABLISHED" and local == port:
            accepted += 1  # the server's end of one node's connection
        elif conn.status == "ESTABLISHED" and remote == port:
            reached = True
    return RendezvousSeen(met=False, joined=accepted if listening else None, reached=reached)


def _tcp_connections(pid: int) -> list[Any]:
    import psutil  # imported when needed: only runs over several nodes look

    with contextlib.suppress(psutil.Error, OSError):
        process = psutil.Process(pid)
        read = getattr(process, "net_connections", None) or process.connections  # psutil < 6
        return list(read(kind="tcp"))
    return []
