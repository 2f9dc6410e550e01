"""The samples of one optimizer step, the same whatever the micro-batch.

A workload's ``batch(step, micro, micro_batch)`` draws micro-batch ``micro`` of ``step``;
its samples depend on the micro-batch size. When the memory controller changes the
geometry, the optimizer must still see the same samples in that step (the configured run's),
so the trainer asks for them through a ``SampleWindow``: the step's ``global_batch / world``
samples are numbered 0..n-1 and drawn in blocks of the configured (base) micro-batch;
micro-batch ``k`` of size ``m`` is samples ``k*m .. k*m+m-1``, cut from (or joined across)
those blocks. At the base micro-batch the workload is called directly (no copy). Blocks
of different lengths (a workload whose sequence lengths vary) are joined by padding the
shorter ones' last dimension with the workload's ``pad`` value for that tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.trainer.workloads.workload import BatchFn

Batch = tuple[torch.Tensor, ...]


def for_rank(batch: BatchFn, rank: int, world: int) -> BatchFn:
    """Rank ``rank``'s share of each step: the workload's micro-batch indices are global
    over the ranks, rank r drawing r, r + world, r + 2*world, ... (data parallelism with no
    sample drawn twice). One rank: ``batch`` itself."""
    if world == 1:
        return batch

    def draw(step: int, micro: int, micro_batch: int) -> Batch:
        return batch(step, micro * world + rank, micro_batch)

    return draw


class SampleWindow:
    """A ``BatchFn`` with the same signature, geometry-invariant in its samples.

    Keeps the last base block drawn (micro-batches arrive in order, so each block of a step
    is drawn once).
    """

    def __init__(self, batch: BatchFn, base_micro_batch: int, pad: tuple[int, ...] | None = None) -> None:
        self.batch = batch
        self.base = base_micro_batch
        self.pad = pad
        """Per tensor, the value that pads a shorter block when blocks are joined."""
        self._cached: tuple[int, int, Batch] | None = None  # (step, block, tensors)

    def __call__(self, step: int, micro: int, micro_batch: int) -> Batch:
        if micro_batch == self.base:
            return self.batch(step, micro, micro_batch)
        first = micro * micro_batch  # index of the first sample within the step
        last = first + micro_batch  # one past the last
        pieces: list[Batch] = []
        for block in range(first // self.base, (last - 1) // self.base + 1):
            tensors = self._block(step, block)
            lo = max(first - block * self.base, 0)
            hi = min(last - block * self.base, self.base)
            pieces.append(tuple(t[lo:hi] for t in tensors))
        if len(pieces) == 1:
            return pieces[0]
        columns = list(zip(*pieces, strict=True))  # per tensor of the batch, its pieces
        pads = self.pad or (None,) * len(columns)
        return tuple(_joined(parts, value) for parts, value in zip(columns, pads, strict=True))

    def _block(self, step: int, block: int) -> Batch:
        cached = self._cached
        if cached is not None and cached[0] == step and cached[1] == block:
            return cached[2]
        tensors = self.batch(step, block, self.base)
        self._cached = (step, block, tensors)
        return tensors


def _joined(parts: tuple[torch.Tensor, ...], pad: int | None) -> torch.Tensor:
    """``parts`` concatenated along the samples, the shorter padded to the longest at the end."""
    width = max(t.shape[-1] for t in parts) if parts[0].dim() > 1 else 0
    if all(t.dim() < 2 or t.shape[-1] == width for t in parts):
        return torch.cat(parts, dim=0)
    if pad is None:
        raise ValueError("the workload's batches differ in length in a step: give Workload.pad to join them")
    return torch.cat([F.pad(t, (0, width - t.shape[-1]), value=pad) for t in parts], dim=0)
