"""A failed window's ZeRO-2 buckets are freed only once the device has run what was queued.

No GPU here: a scripted side stream stands in for DeepSpeed's ``overlap_comm`` reduction
stream, and ``torch.cuda.synchronize`` for the driver's wait. What is checked is that the
buckets are never cleared while a reduction that reads them is still queued.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.trainer.memory.oom_recovery import discard_window


class SideStream:
    """Reductions queued and not yet run (each reads the buckets)."""

    def __init__(self) -> None:
        self.queued = 1

    def synchronize(self, device: torch.device | None = None) -> None:
        self.queued = 0


class Bucket:
    def __init__(self, stream: SideStream) -> None:
        self.stream = stream
        self.cleared_with_queued: int | None = None

    def clear(self) -> None:
        self.cleared_with_queued = self.stream.queued


class ZeroTwo:
    def __init__(self, stream: SideStream) -> None:
        self.bucket = Bucket(stream)
        self.ipg_buckets = {torch.float16: self.bucket}
        self.params_already_reduced = [True, True]
        self.micro_step_id = 3

    def zero_grad(self) -> None:
        pass


class Engine:
    def __init__(self, device: torch.device, optimizer: Any) -> None:
        self.device = device
        self.optimizer = optimizer
        self.micro_steps = 3
        self.losses: object = 1.0

    def gradient_accumulation_steps(self) -> int:
        return 4

    def zero_grad(self) -> None:
        pass


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> SideStream:
    side = SideStream()
    monkeypatch.setattr(torch.cuda, "synchronize", side.synchronize)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return side


def test_a_cuda_windows_buckets_are_cleared_after_its_queued_reductions(stream: SideStream) -> None:
    optimizer = ZeroTwo(stream)
    engine = Engine(torch.device("cuda", 0), optimizer)
    discard_window(engine)
    assert optimizer.bucket.cleared_with_queued == 0
    assert optimizer.params_already_reduced == [False, False] and engine.micro_steps == 4


def test_a_cpu_window_is_discarded_without_touching_cuda(stream: SideStream) -> None:
    optimizer = ZeroTwo(stream)
    discard_window(Engine(torch.device("cpu"), optimizer))
    assert stream.queued == 1  # CPU kernels run eagerly: no device wait was asked for
    assert optimizer.bucket.cleared_with_queued == 1
