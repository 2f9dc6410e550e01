"""The trainer's ``hang``: the next step blocks once for its seconds, on every rank or the
one named, inside the memory controller's step (its sampler attached, as for a real step)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.chaos.kinds.hang import Hang
from engine.config.config_file import build_run_config
from engine.trainer.chaos.injections import ChaosInjections
from engine.trainer.chaos.performers import hang
from engine.trainer.link import NullLink
from engine.trainer.memory.adaptive_memory import AdaptiveMemory
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.wire.protocol import InjectChaos
from tests.trainer.test_chaos_injections import applied, chaos, losses
from tests.trainer.test_memory_probe import StubDeepSpeedEngine


def test_the_next_step_blocks_once_for_its_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(hang.time, "sleep", slept.append)
    injections, link, memory = chaos()
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Hang(seconds=30)))
    injections.at_boundary(2)
    assert losses(injections, memory, 3) == [2.0, 2.0, 2.0] and slept == [30.0]
    assert applied(link)[0]["detail"] == "the next step blocks for 30 s"


def test_aimed_at_one_rank_only_that_rank_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: dict[int, list[float]] = {0: [], 1: []}
    for rank in (0, 1):
        monkeypatch.setattr(hang.time, "sleep", slept[rank].append)
        injections, link, memory = chaos()
        memory.ranks = SimpleNamespace(rank=rank, world=2)
        for chaos_id, target in (("c-1", 1), ("c-2", 5)):
            injections.inbox.append(InjectChaos(chaos_id=chaos_id, request=Hang(seconds=9, rank=target)))
        injections.at_boundary(0)
        losses(injections, memory, 2)
        details = [a["detail"] for a in applied(link)]
        assert details == ["the next step blocks for 9 s on rank 1", "no rank 5 among 2: nothing done"]
    assert slept == {0: [], 1: [9.0]}


def test_it_blocks_inside_the_memory_controllers_step(monkeypatch: pytest.MonkeyPatch) -> None:
    config = build_run_config({"train": {"micro_batch": 2, "global_batch": 8}})
    module = torch.nn.Linear(4, 4)
    memory = AdaptiveMemory(
        config, StubDeepSpeedEngine(2, 4), module, MemoryProbe(torch.device("cpu")), NullLink()
    )
    injections = ChaosInjections(memory.engine, memory, NullLink(), "fp32")
    hooks_while_blocked: list[int] = []
    monkeypatch.setattr(hang.time, "sleep", lambda _s: hooks_while_blocked.append(len(module._forward_hooks)))
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Hang(seconds=5)))

    def train_step(_engine: Any, _batch: Any, _step: int) -> torch.Tensor:
        return torch.zeros(())

    injections.at_boundary(0)
    memory.before_step(0)
    memory.run_step(train_step, memory.engine, lambda *_: (), 0, hook=injections.hook)
    assert hooks_while_blocked == [1]  # the controller's sampler watched the hung step
