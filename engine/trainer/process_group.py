"""The rendezvous environment for one trainer process without a launcher.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every rank; a
single process started by the supervisor has none of them, and DeepSpeed's gloo/nccl
initialisation needs all five. Each process picks its own free port, so parallel runs and
tests do not collide.
"""

from __future__ import annotations

import os
import socket

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_single_process_env() -> bool:
    """Fill in a one-rank world unless a launcher did; returns True if it filled it in."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return False  # torchrun (or the user) set the world up
    os.environ.update(
        {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
        }
    )
    return True


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))
