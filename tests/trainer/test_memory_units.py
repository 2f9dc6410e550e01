"""Trainer-side pieces of adaptive memory: the model-state estimate against DeepSpeed's own
estimators, the geometry-invariant sample window, ballast and OOM-injection specs, the
loss-scale floor watch."""

from __future__ import annotations

import contextlib
import io
import re
import weakref

import pytest
import torch

from engine.memory.model import model_state_bytes
from engine.trainer.memory import oom_recovery
from engine.trainer.memory.ballast import Ballast, parse_schedule, parse_size
from engine.trainer.memory.loss_scale_floor import FloorWatch, is_floor_error
from engine.trainer.memory.oom_injection import Injection, parse_injections
from engine.trainer.memory.oom_recovery import drop_frames, is_oom, release_memory
from engine.trainer.workloads.sample_window import SampleWindow

GB = 1024**3  # DeepSpeed prints GiB and calls them GB


def _model(width: int, depth: int) -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])


def _printed_gb(fn, *args, **kwargs) -> list[float]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args, **kwargs)
    return [float(x) for x in re.findall(r"([\d.]+)GB", out.getvalue())]


@pytest.mark.parametrize(("width", "depth", "gpus"), [(1024, 4, 1), (2048, 3, 1), (1536, 4, 4)])
def test_model_states_match_deepspeeds_estimators(width: int, depth: int, gpus: int) -> None:
    from deepspeed.runtime.zero.stage3 import (
        estimate_zero3_model_states_mem_needs,
        estimate_zero3_model_states_mem_needs_all_live,
    )
    from deepspeed.runtime.zero.stage3 import model_to_params as zero3_params
    from deepspeed.runtime.zero.stage_1_and_2 import (
        estimate_zero2_model_states_mem_needs,
        estimate_zero2_model_states_mem_needs_all_live,
    )

    model = _model(width, depth)
    params, largest = zero3_params(model)
    _cpu, zero2_gpu = estimate_zero2_model_states_mem_needs(params, gpus, cpu_offload=False)
    assert model_state_bytes(params, "fp16", 2, gpus).total == zero2_gpu
    _cpu, zero3_gpu, _ = estimate_zero3_model_states_mem_needs(params, largest, gpus, cpu_offload=False)
    assert model_state_bytes(params, "fp16", 3, gpus, largest).total == zero3_gpu

    # The *_all_live functions print a table (GB, 2 decimals); the no-offload row is the last.
    live2 = _printed_gb(estimate_zero2_model_states_mem_needs_all_live, model, num_gpus_per_node=gpus)
    assert live2[-1] == pytest.approx(model_state_bytes(params, "fp16", 2, gpus).total / GB, abs=0.006)
    live3 = _printed_gb(estimate_zero3_model_states_mem_needs_all_live, model, num_gpus_per_node=gpus)
    ours3 = model_state_bytes(params, "fp16", 3, gpus, largest).total / GB
    assert any(abs(gpu - ours3) < 0.006 for gpu in live3[1::2])  # (cpu, gpu) pairs per option


def test_sample_window_gives_a_step_the_same_samples_at_any_micro_batch() -> None:
    calls: list[tuple[int, int, int]] = []

    def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append((step, micro, micro_batch))
        ids = torch.arange(micro_batch) + 1000 * step + 100 * micro
        return ids, -ids

    window = SampleWindow(batch, base_micro_batch=4)
    reference = torch.cat([window(3, k, 4)[0] for k in range(2)])  # 4 x 2: the configured geometry
    for micro_batch, gas in [(1, 8), (2, 4), (8, 1)]:
        drawn = [window(3, k, micro_batch) for k in range(gas)]
        assert all(x.shape[0] == micro_batch and torch.equal(y, -x) for x, y in drawn)
        assert torch.equal(torch.cat([x for x, _ in drawn]), reference)
    calls.clear()
    [window(5, k, 1) for k in range(8)]
    assert calls == [(5, 0, 4), (5, 1, 4)]  # each base block drawn once


def test_ballast_schedule_and_sizes() -> None:
    assert parse_size("64M") == 64 << 20 and parse_size("2k") == 2048 and parse_size("10") == 10
    assert parse_schedule("20:0, 10:1G") == [(10, 1 << 30), (20, 0)]
    with pytest.raises(ValueError):
        parse_schedule("10")
    ballast = Ballast(parse_schedule("2:1M,4:0"), torch.device("cpu"))
    assert [ballast.at_step(s) for s in range(6)] == [0, 0, 1 << 20, 1 << 20, 0, 0]


def test_oom_injection_specs() -> None:
    assert parse_injections("5:1:backward:4, 2:0:forward") == [
        Injection(5, 1, "backward", 4),
        Injection(2, 0, "forward", 1),
    ]
    with pytest.raises(ValueError):
        parse_injections("5:1:sideways")


def test_oom_recognised_and_floor_watch() -> None:
    assert is_oom(MemoryError()) and is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_oom(
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
    )
    assert not is_oom(RuntimeError("shape mismatch"))
    assert is_floor_error(Exception("Current loss scale already at minimum - cannot decrease scale anymore."))
    watch = FloorWatch(limit=3)
    assert [watch.note(True, 1.0, 1.0) for _ in range(3)] == [False, False, True]
    assert not watch.note(True, 2.0, 1.0) and watch.run == 0  # above the floor: not the floor


def test_an_ooms_activations_are_freed_while_the_handler_still_holds_the_error() -> None:
    """The failed forward's frames (and their tensors) live as long as the error's traceback:
    without ``drop_frames`` the window would be redone with them still allocated."""

    def forward() -> None:
        activations = torch.ones(1024)
        alive.append(weakref.ref(activations))
        raise MemoryError("out of memory")

    alive: list[weakref.ref[torch.Tensor]] = []
    try:
        forward()
    except MemoryError as err:
        assert alive[0]() is not None  # held by forward's frame, through err.__traceback__
        drop_frames(err)
        assert alive[0]() is None
        assert err.__traceback__ is not None  # file and line numbers are still there


def test_releasing_a_window_frees_its_fresh_cycles_without_a_full_collection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failed window's garbage is young: generations 0-1 are collected on the CPU (a full
    collection cost 0.11 s per OOM and found nothing more); a boundary shrink collects none."""

    class Node:
        pass

    node = Node()
    node.self = node  # type: ignore[attr-defined]  # a cycle: only the collector frees it
    freed = weakref.ref(node)
    del node
    generations: list[int] = []
    real_collect = oom_recovery.gc.collect
    monkeypatch.setattr(oom_recovery.gc, "collect", lambda g=2: generations.append(g) or real_collect(g))
    oom_recovery.gc.disable()  # no automatic collection in between: only ours may free it
    try:
        release_memory(collect=False)
        assert generations == [] and freed() is not None
        release_memory()
    finally:
        oom_recovery.gc.enable()
    assert freed() is None
    assert generations == ([2] if torch.cuda.is_available() else [1])
