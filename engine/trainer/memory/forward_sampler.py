"""The CPU's step peak: the process's RSS read right after a forward, when all of a
micro-batch's activations are alive (CUDA has the allocator's own peak counter instead).

One read per step is enough when every micro-batch of a step has the same size; with
``cpu_enforce`` every forward is read (each is a check: an RSS over the budget raises
``MemoryError``, standing in for the CUDA allocator's limit), and so with sequence lengths
that vary within a step (the longest micro-batch may come last). The hook is on the model
only while a step runs, so nothing of ours is left on it between steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from engine.trainer.memory.memory_probe import MemoryProbe


class ForwardSampler:
    def __init__(self, probe: MemoryProbe, budget: int, enforce: bool, every_forward: bool) -> None:
        self.probe = probe
        self.budget = budget
        """Bytes an RSS may not pass with ``enforce``."""
        self.enforce = enforce
        self.every_forward = enforce or every_forward
        self._sampled = False
        """The running step's post-forward RSS has been read."""

    def begin(self, resident: int | None) -> None:
        """A new per-step peak (from ``resident``, bytes read just now, if given)."""
        self.probe.begin_step(resident)
        self._sampled = False

    @contextmanager
    def attached(self, module: torch.nn.Module) -> Iterator[None]:
        """The hook on ``module`` while the block runs (CPU only; ~2 us to add)."""
        hook = module.register_forward_hook(self._after_forward) if self.probe.kind == "cpu-rss" else None
        try:
            yield
        finally:
            if hook is not None:
                hook.remove()

    def _after_forward(self, _module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
        if self._sampled and not self.every_forward:
            return
        self._sampled = True
        rss = self.probe.note()
        if self.enforce and rss > self.budget:
            raise MemoryError(f"cpu-rss {rss} bytes over the budget of {self.budget} bytes")
