"""The CPU memory probe and what the adaptive-memory path reads per step: the RSS from
``/proc`` agrees with psutil, a step's peak starts from the boundary reading, the forward
hook is on the model only during a step and reads the RSS once per step."""

from __future__ import annotations

import psutil
import pytest
import torch

from engine.config.config_file import build_run_config
from engine.memory.model import MemoryModel, Predictions
from engine.trainer.link import NullLink
from engine.trainer.memory.adaptive_memory import AdaptiveMemory
from engine.trainer.memory.memory_probe import MemoryProbe, RssReader

MIB = 1 << 20


def test_rss_reader_agrees_with_psutil_and_sees_growth() -> None:
    read = RssReader()
    assert abs(read() - psutil.Process().memory_info().rss) < 16 * MIB  # bytes, same counter
    before = read()
    ballast = torch.ones(64 * MIB, dtype=torch.uint8)  # written: resident
    assert read() - before > 48 * MIB
    del ballast


def test_step_peak_starts_at_the_boundary_reading_and_ends_with_one_read() -> None:
    probe = MemoryProbe(torch.device("cpu"))
    now = probe.resident()
    probe.begin_step(now + 512 * MIB)  # as if the boundary had read this much
    peak, resident = probe.end_step()
    assert peak == now + 512 * MIB and abs(resident - now) < 16 * MIB
    probe.begin_step()  # reads for itself
    assert probe.step_peak() <= now + 16 * MIB


def test_predictions_are_a_lazy_mapping_over_the_allowed_micro_batches() -> None:
    model = MemoryModel(model_states=1000, per_sample=10.0, seq_len=8)
    predicted = Predictions(model, (1, 2, 4, 8))
    assert dict(predicted) == {m: model.predict(m) for m in (1, 2, 4, 8)}
    assert predicted.get(3, -1) == -1 and 16 not in predicted
    with pytest.raises(KeyError):
        predicted[5]


class StubDeepSpeedEngine:
    """What AdaptiveMemory reads from DeepSpeed's engine between steps."""

    def __init__(self, micro_batch: int, grad_accum: int) -> None:
        self.micro_batch, self.grad_accum = micro_batch, grad_accum
        self.global_steps = 0
        self.optimizer = object()

    def train_micro_batch_size_per_gpu(self) -> int:
        return self.micro_batch

    def gradient_accumulation_steps(self) -> int:
        return self.grad_accum


def test_forward_hook_only_during_a_step_and_one_rss_read_per_step() -> None:
    config = build_run_config({"train": {"micro_batch": 2, "global_batch": 8}})
    module = torch.nn.Linear(4, 4)
    probe = MemoryProbe(torch.device("cpu"))
    memory = AdaptiveMemory(config, StubDeepSpeedEngine(2, 4), module, probe, NullLink())
    reads = 0
    real = probe._rss

    def counted() -> int:
        nonlocal reads
        reads += 1
        return real()

    probe._rss = counted  # type: ignore[method-assign]
    hooks_seen = []

    def train_step(_engine: object, _batch: object, _step: int) -> torch.Tensor:
        hooks_seen.append(len(module._forward_hooks))
        for _ in range(4):  # grad_accum forwards
            module(torch.zeros(2, 4))
        return torch.zeros(())

    assert not module._forward_hooks
    for step in range(3):
        reads = 0
        memory.before_step(step)
        memory.run_step(train_step, memory.engine, lambda *_: (), step)
        memory.after_step(overflow=False, scale=None)
        assert reads == 3  # the boundary, the first forward, the step's end
    assert hooks_seen == [1, 1, 1] and not module._forward_hooks
    assert memory.figures()["mem_step_peak"] == memory.step_peak > 0
