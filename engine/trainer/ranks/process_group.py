"""The rendezvous environment for one trainer process without a launcher.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every rank; a
single process started by the supervisor has none of them, and DeepSpeed's gloo/nccl
initialisation needs all five. Each process picks its own free port, so parallel runs and
tests do not collide.

``join_process_group`` makes the process group with the run's collective timeout, before
``deepspeed.initialize`` (which would otherwise make it with DeepSpeed's default).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta


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


def join_process_group(timeout_s: float) -> None:
    """Initialise torch.distributed through DeepSpeed (the accelerator's backend: nccl on
    CUDA, gloo on the CPU), collectives failing after ``timeout_s`` seconds of waiting."""
    import deepspeed  # slow: imported only when a trainer starts

    from engine.trainer.deepspeed_compat import decline_inference_ops

    decline_inference_ops()  # no build of an op that training never calls
    deepspeed.init_distributed(timeout=timedelta(seconds=timeout_s), verbose=False)
