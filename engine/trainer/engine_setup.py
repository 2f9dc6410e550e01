"""The process and the DeepSpeed engine a trainer runs in: its threads, its seed, the
engine built from the run config, and leaving torch.distributed cleanly at the end."""

from __future__ import annotations

import os
import random
from typing import Any

import torch

from engine.config.deepspeed_config import build_deepspeed_config
from engine.config.run_config import RunConfig
from engine.cpu_share import threads_per_rank, usable_cores, user_threads
from engine.trainer.deepspeed_compat import allow_cpu_fp16
from engine.trainer.lr_schedule import warmup_cosine
from engine.trainer.memory.host_heap import steady_host_heap
from engine.trainer.ranks.process_group import join_process_group, world_size
from engine.trainer.workloads.workload import Workload


def share_cpu_cores() -> None:
    """On a CPU-only host, every core this process may run on goes to torch, shared evenly
    with the other ranks on the host (``LOCAL_WORLD_SIZE``); the user's ``OMP_NUM_THREADS``
    wins (the supervisor sets it per rank under torchrun, which would otherwise pin every
    rank to one thread). The supervisor and the console do not reserve a core: they run at
    a lower priority (``engine.supervisor.priority``) and take a core only when idle.
    The host heap is made steady too (``host_heap``): the activations live there.
    """
    if torch.cuda.is_available():
        return
    steady_host_heap()  # activations live in host memory: reuse them, do not re-fault them
    wanted = user_threads(os.environ)
    if wanted is None:
        wanted = threads_per_rank(usable_cores(), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(wanted)


def seed_everything(seed: int) -> None:
    """Model init is a function of the seed (the data order is seeded per batch)."""
    random.seed(seed)
    torch.manual_seed(seed)


def build_engine(config: RunConfig, workload: Workload) -> Any:
    """``deepspeed.initialize`` with our config; returns the engine."""
    import deepspeed  # imported here: slow, and `--help` should not pay for it

    if config.train.precision == "fp16":
        allow_cpu_fp16()
    join_process_group(config.train.collective_timeout_s)  # deepspeed.initialize keeps it
    ds_config = build_deepspeed_config(config, world_size())
    params = [p for p in workload.model.parameters() if p.requires_grad]
    # A client scheduler wins over the config's in DeepSpeed: the workload's, else ours only
    # if the user's deepspeed_config has none.
    scheduler = workload.lr_scheduler or (None if "scheduler" in ds_config else warmup_cosine(config))
    engine, _optimizer, _loader, _scheduler = deepspeed.initialize(
        model=workload.model, model_parameters=params, config=ds_config, lr_scheduler=scheduler
    )
    return engine


def leave_process_group(meet: bool = True) -> None:
    """Tear down torch.distributed so the process exits cleanly (and can train again).

    ``meet``: with several ranks, all of them first meet in a barrier, so that none tears
    the group down while another still uses it."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        if meet and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()
