"""The trainer's ranks as one group: the few collectives memtui itself needs.

DeepSpeed and torchrun are the distributed engine (docs/architecture.md): the gradients' all-reduce is
DeepSpeed's. memtui adds small collectives of its own on the default process group that
DeepSpeed initialised, so that every rank takes the same decision at the same step:

- ``max_ints``      stop, pause and directive counts, memory readings, and a checkpoint's
                    write failures (all-reduce MAX; also the barrier before rank 0 seals)
- ``broadcast``     rank 0's directives and checkpoint choices (pickled objects)
- ``gather_ints``   every rank's memory for rank 0's telemetry (all-gather)
- ``gather_floats`` every rank's screened workload metrics, averaged by rank 0 (all-gather)
- ``gather``        every rank's eval sums (pickled objects, all-gather)

Each call is a collective: every rank must make the same calls in the same order, which
the loop guarantees by calling them at step boundaries from code paths that do not branch
on the rank. With one rank every call returns at once and touches no process group.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class RankGroup:
    """``rank`` of ``world`` processes; tensors for collectives live on ``device``
    (gloo takes CPU tensors, nccl takes CUDA ones)."""

    def __init__(self, rank: int = 0, world: int = 1, device: torch.device | None = None) -> None:
        self.rank = rank
        self.world = world
        self.device = device or torch.device("cpu")

    @classmethod
    def of_engine(cls, engine: Any) -> RankGroup:
        """The group DeepSpeed initialised for ``engine`` (one rank without a process group)."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls()
        device = engine.device if dist.get_backend() == "nccl" else torch.device("cpu")
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def leader(self) -> bool:
        """Rank 0: the one that talks to the supervisor and seals checkpoints."""
        return self.rank == 0

    def max_ints(self, values: list[int]) -> list[int]:
        """Element-wise maximum over the ranks (int64)."""
        if self.world == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return [int(v) for v in tensor.tolist()]

    def gather_ints(self, values: list[int]) -> list[list[int]]:
        """Every rank's ``values`` (same length on all ranks), in rank order."""
        if self.world == 1:
            return [list(values)]
        mine = torch.tensor(values, dtype=torch.int64, device=self.device)
        gathered = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(gathered, mine)
        return [[int(v) for v in t.tolist()] for t in gathered]

    def gather_floats(self, values: list[float]) -> list[list[float]]:
        """Every rank's ``values`` (same length on all ranks), in rank order (float64)."""
        if self.world == 1:
            return [list(values)]
        mine = torch.tensor(values, dtype=torch.float64, device=self.device)
        gathered = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(gathered, mine)
        return [[float(v) for v in t.tolist()] for t in gathered]

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (others pass anything, e.g. None)."""
        if self.world == 1:
            return value
        box = [value if self.leader else None]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order, on every rank."""
        if self.world == 1:
            return [value]
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, value)
        return gathered
