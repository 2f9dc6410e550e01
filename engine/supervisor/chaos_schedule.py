"""Scheduled chaos: which kind is injected at which optimizer step, drawn from the seed alone.

The schedule is a pure function of the run's ``ChaosConfig``: gaps between injections are
exponential with mean ``every_steps`` (at least one step), each kind drawn by its weight,
all from ``random.Random(seed)``. The same seed gives the same steps and kinds, so an
unattended run is attacked at random but reproducibly, and a new supervisor (a restart of
the whole tree, ``memtui resume``) goes on with the same schedule by skipping what lies
behind it: ``next_after(config, step)``. Torch-free.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import NamedTuple

from engine.chaos_kinds import ChaosConfig


class Scheduled(NamedTuple):
    step: int
    """The optimizer step it is drawn for (injected at the first step at or after it)."""
    kind: str


def schedule(config: ChaosConfig) -> Iterator[Scheduled]:
    """Every scheduled injection in step order (endless); nothing while ``kinds`` is empty."""
    if not config.kinds:
        return
    rng = random.Random(config.seed)
    kinds = list(config.kinds)
    weights = [config.kinds[k] for k in kinds]  # type: ignore[index]
    step = 0
    while True:
        step += max(1, round(rng.expovariate(1.0 / config.every_steps)))
        yield Scheduled(step, rng.choices(kinds, weights)[0])


def next_after(config: ChaosConfig, step: int) -> Scheduled | None:
    """The first scheduled injection at a step after ``step``; None while ``kinds`` is empty."""
    for scheduled in schedule(config):
        if scheduled.step > step:
            return scheduled
    return None
