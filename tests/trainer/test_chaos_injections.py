"""The trainer's chaos state without DeepSpeed: what each request puts in force, for how
many steps, what ``chaos_applied`` says, and the start-time injection code it reuses
(ballast schedule, OOM injector, full disk)."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.chaos.kinds.disk_full import DiskFull
from engine.chaos.kinds.memory import Ballast, Oom, Release
from engine.chaos.kinds.numerics import NanLoss, Overflow, Spike
from engine.chaos.kinds.processes import Kill
from engine.chaos.kinds.slow_steps import SlowSteps
from engine.trainer.chaos.disk_full_injection import full_disk
from engine.trainer.chaos.injections import ChaosInjections
from engine.trainer.chaos.performers import numerics, slow_steps
from engine.trainer.link import NullLink
from engine.trainer.memory.ballast import Ballast as BallastHolder
from engine.trainer.memory.oom_injection import OomInjector
from engine.trainer.ranks.rank_group import RankGroup
from engine.trainer.ranks.rank_link import RankLink
from engine.wire.protocol import InjectChaos, TrainerEvent
from tests.trainer.test_rank_link import ScriptedGroup


class Loss(torch.nn.Module):
    """A workload's shape: forward returns a scalar loss."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.w * x).sum()


class Writer:
    def save(self, state_dict: Any, path: str) -> None:
        return None


class StubDeepSpeedEngine:
    def __init__(self) -> None:
        self.checkpoint_engine = Writer()

    def train_micro_batch_size_per_gpu(self) -> int:
        return 4


class FakeMemory:
    """What ChaosInjections uses of AdaptiveMemory."""

    def __init__(self) -> None:
        self.module = Loss()
        self.ballast = BallastHolder([], torch.device("cpu"))
        self.injector = OomInjector([])
        self.ranks = RankGroup()
        self.step_seconds: float | None = None

    def run_step(self, train_step: Callable[..., Any], engine: Any, batch: Any, step: int, hook: Any) -> Any:
        return hook(train_step, step)(engine, batch, step)  # as AdaptiveMemory: the hook inside


def forward(engine: Any, batch: Any, step: int) -> torch.Tensor:
    loss: torch.Tensor = batch(torch.ones(2))
    return loss


def chaos(precision: str = "fp16") -> tuple[ChaosInjections, NullLink, FakeMemory]:
    link, memory = NullLink(record=True), FakeMemory()
    return ChaosInjections(StubDeepSpeedEngine(), memory, link, precision), link, memory


def applied(link: NullLink) -> list[dict[str, Any]]:
    return [m.data for m in link.sent or [] if isinstance(m, TrainerEvent) and m.type == "chaos_applied"]


def losses(injections: ChaosInjections, memory: FakeMemory, steps: int) -> list[float]:
    return [
        float(memory.run_step(forward, injections.engine, memory.module, step, injections.hook).detach())
        for step in range(steps)
    ]


def test_each_request_is_applied_at_the_boundary_with_its_id_step_and_detail() -> None:
    injections, link, memory = chaos()
    injections.inbox.extend(
        [
            InjectChaos(chaos_id="c-1", request=Ballast(bytes=1 << 20, steps=2)),
            InjectChaos(chaos_id="c-2", request=DiskFull(saves=2)),
            InjectChaos(chaos_id="c-3", request=Kill()),  # the supervisor's: not ours
        ]
    )
    injections.at_boundary(7)
    events = applied(link)
    assert [(e["chaos_id"], e["kind"], e["step"]) for e in events] == [
        ("c-1", "ballast", 7),
        ("c-2", "disk_full", 7),
    ]
    assert "1048576 bytes" in events[0]["detail"] and "2 saves" in events[1]["detail"]
    assert not injections.inbox
    assert [memory.ballast.at_step(s) for s in (6, 7, 8, 9)] == [0, 1 << 20, 1 << 20, 0]


def test_release_lets_go_of_ballast_held_until_released() -> None:
    injections, link, memory = chaos()
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Ballast(bytes=4096, steps=0)))
    injections.at_boundary(1)
    assert memory.ballast.at_step(1000) == 4096
    injections.inbox.append(InjectChaos(chaos_id="c-2", request=Release()))
    injections.at_boundary(1001)
    assert memory.ballast.at_step(1001) == 0 and "4096 bytes" in applied(link)[-1]["detail"]


def test_ballast_the_host_cannot_give_is_said_and_none_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    injections, link, memory = chaos()

    def refuse(size: int, **_kwargs: Any) -> torch.Tensor:
        raise RuntimeError(f"DefaultCPUAllocator: can't allocate memory: you tried to allocate {size} bytes")

    monkeypatch.setattr(torch, "ones", refuse)
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Ballast(bytes=1 << 40)))
    injections.at_boundary(2)
    assert "could not be allocated" in applied(link)[0]["detail"]
    assert memory.ballast.held == 0 and memory.ballast.at_step(3) == 0


def test_the_newest_ballast_plan_replaces_the_schedule_from_its_step_on() -> None:
    holder = BallastHolder([(5, 100), (50, 0)], torch.device("cpu"))
    holder.plan(20, 300, steps=10)
    assert holder.schedule == [(5, 100), (20, 300), (30, 0)]
    assert [holder.wanted(s) for s in (4, 5, 20, 29, 30, 60)] == [0, 100, 300, 300, 0, 0]


def test_fp16_nan_loss_poisons_the_loss_for_its_steps_then_stops() -> None:
    injections, _link, memory = chaos("fp16")
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=NanLoss(steps=2, value="inf")))
    injections.at_boundary(0)
    assert [math.isinf(v) for v in losses(injections, memory, 3)] == [True, True, False]
    assert not memory.module._forward_hooks  # nothing of ours is left on the model


def test_a_spike_multiplies_one_steps_loss_and_its_gradients_then_stops() -> None:
    injections, link, memory = chaos("fp32")
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Spike(factor=500.0)))
    injections.at_boundary(3)
    assert "multiplied by 500" in applied(link)[0]["detail"]
    loss = memory.run_step(forward, None, memory.module, 3, injections.hook)
    loss.backward()
    assert float(loss.detach()) == 1000.0  # what the model trains on, not only what is shown
    assert memory.module.w.grad is not None and memory.module.w.grad.tolist() == [500.0, 500.0]
    assert losses(injections, memory, 2) == [2.0, 2.0] and not memory.module._forward_hooks


def test_an_overflow_burst_leaves_the_loss_and_makes_the_gradients_infinite() -> None:
    injections, _link, memory = chaos("fp16")
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Overflow(steps=1)))
    injections.at_boundary(0)
    loss = memory.run_step(forward, None, memory.module, 0, injections.hook)
    loss.backward()
    assert float(loss.detach()) == 2.0 and memory.module.w.grad is not None
    assert not torch.isfinite(memory.module.w.grad).any()


def test_an_overflow_burst_does_not_apply_without_fp16_and_says_so() -> None:
    injections, link, memory = chaos("bf16")
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Overflow(steps=3)))
    injections.at_boundary(4)
    assert (
        "not applicable in bf16" in applied(link)[0]["detail"]
        and injections.performers["overflow"].steps == 0
    )
    assert losses(injections, memory, 3) == [2.0, 2.0, 2.0]


def test_without_fp16_a_nan_loss_step_is_the_trainers_own_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    injections, _link, memory = chaos("fp32")
    skipped: list[int] = []

    def skip(engine: Any, batch: Any, step: int, loss: float) -> torch.Tensor:
        skipped.append(step)
        return torch.tensor(loss)

    monkeypatch.setattr(numerics, "skipped_step", skip)
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=NanLoss(steps=2)))
    injections.at_boundary(0)
    values = losses(injections, memory, 3)
    assert skipped == [0, 1] and math.isnan(values[0]) and math.isnan(values[1]) and values[2] == 2.0


def test_slow_steps_sleep_within_their_bounds_and_the_same_request_sleeps_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(slow_steps.time, "sleep", slept.append)
    for _ in range(2):
        injections, _link, memory = chaos()
        injections.inbox.append(
            InjectChaos(chaos_id="c-9", request=SlowSteps(steps=3, delay_s=0.5, jitter=0.2))
        )
        injections.at_boundary(0)
        losses(injections, memory, 5)
    assert len(slept) == 6 and all(0.5 <= s <= 0.6 for s in slept) and slept[:3] == slept[3:]


def test_slow_steps_by_default_make_each_step_a_multiple_of_the_step_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``delay_s``: the delay is ``factor - 1`` times the last timed step, fixed for the
    burst (a 40 ms step at factor 3: 80 ms, + up to 25% jitter), whatever the later steps take."""
    slept: list[float] = []
    monkeypatch.setattr(slow_steps.time, "sleep", slept.append)
    injections, link, memory = chaos()
    memory.step_seconds = 0.04
    injections.inbox.append(InjectChaos(chaos_id="c-5", request=SlowSteps(steps=4)))
    injections.at_boundary(0)
    memory.step_seconds = 0.12  # a slowed step is not the basis of the next one's delay
    losses(injections, memory, 6)
    assert len(slept) == 4 and all(0.08 <= s <= 0.1 for s in slept), slept
    detail = applied(link)[0]["detail"]
    assert "slowed by 0.080 s" in detail and "3.0x a 0.040 s step" in detail


def test_slow_steps_aimed_at_one_rank_slow_only_that_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: dict[int, list[float]] = {0: [], 1: []}
    details = []
    for rank in (0, 1):
        monkeypatch.setattr(slow_steps.time, "sleep", slept[rank].append)
        injections, link, memory = chaos()
        memory.ranks = SimpleNamespace(rank=rank, world=2)
        for chaos_id, target in (("c-1", 1), ("c-2", 5)):
            request = SlowSteps(steps=2, delay_s=0.5, jitter=0.0, rank=target)
            injections.inbox.append(InjectChaos(chaos_id=chaos_id, request=request))
        injections.at_boundary(0)
        losses(injections, memory, 3)
        details.append([a["detail"] for a in applied(link)])
    assert slept == {0: [], 1: [0.5, 0.5]}
    assert details[0] == details[1]  # every rank says the same
    assert "on rank 1" in details[0][0] and "no rank 5 among 2: nothing done" in details[0][1]


def test_an_oom_request_fires_once_in_the_next_steps_first_forward() -> None:
    injections, _link, memory = chaos()
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=Oom(phase="forward")))
    injections.at_boundary(3)
    with pytest.raises(MemoryError, match="injected OOM in forward of step 4"):
        memory.module(torch.ones(2))
    assert float(memory.module(torch.ones(2)).detach()) == 2.0  # the redone window goes through


def test_the_next_saves_fail_on_a_full_disk_and_then_succeed(tmp_path: Any) -> None:
    injections, _link, _memory = chaos()
    injections.inbox.append(InjectChaos(chaos_id="c-1", request=DiskFull(saves=2)))
    injections.at_boundary(0)
    writer = injections.engine.checkpoint_engine
    outcomes = []
    for n in range(3):
        with injections.saving():
            try:
                writer.save({"n": n}, str(tmp_path / f"{n}.pt"))
                outcomes.append("saved")
            except OSError as err:
                outcomes.append(err.strerror)
    assert outcomes == ["No space left on device (injected)"] * 2 + ["saved"]
    assert "save" not in vars(writer)


def test_a_full_disk_nests_and_restores_the_outer_one() -> None:
    engine = StubDeepSpeedEngine()
    with full_disk(engine):
        outer = vars(engine.checkpoint_engine)["save"]
        with full_disk(engine):
            pass
        assert vars(engine.checkpoint_engine)["save"] is outer
    assert "save" not in vars(engine.checkpoint_engine)


def test_rank0_shares_chaos_requests_with_every_rank() -> None:
    inner = NullLink(record=True)
    request = InjectChaos(chaos_id="c-1", request=NanLoss(steps=1))
    inner.chaos.append(request)
    leader = RankLink(inner, ScriptedGroup(0))
    leader.sync()
    assert list(leader.chaos) == [request] and not inner.chaos
    shared = ([], [request.model_dump(mode="json")])
    follower = RankLink(NullLink(), ScriptedGroup(1, others=[[0, 1, 0]], sent=[shared]))
    follower.sync()
    assert list(follower.chaos) == [request]
