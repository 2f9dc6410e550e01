"""The step sample the directive and planner tests judge: the fields a planner reads, with
headroom under a 1000 MiB budget (100 MiB predicted) and a healthy fp16 loss scale."""

from __future__ import annotations

from typing import Any

from engine.domain import TelemetrySample

MIB = 1 << 20


def sample(step: int, **over: Any) -> TelemetrySample:
    fields = {
        "step": step,
        "ts": 0.0,
        "samples": 0,
        "tokens": 0,
        "loss": 2.0,
        "lr": 1e-3,
        "step_time_s": 0.01,
        "tokens_per_s": 1.0,
        "micro_batch": 8,
        "grad_accum": 1,
        "loss_scale": 4096.0,
        "mem_predicted": 100 * MIB,
        "mem_budget": 1000 * MIB,
    }
    return TelemetrySample(**{**fields, **over})
