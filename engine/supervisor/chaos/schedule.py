"""Scheduled chaos: which kind is injected at which optimizer step, drawn from the seed alone.

The schedule is a pure function of the run's ``ChaosConfig``: gaps between injections are
exponential with mean ``every_steps`` (at least one step), all from ``random.Random(seed)``.
Kinds are dealt from shuffled decks rather than drawn one by one: a deck holds each kind in
proportion to its weight (the lightest once, ``round(weight / lightest)`` copies each, at
most ``MAX_COPIES``), so every kind is attacked once per deck, a short endurance run
rehearses them all, and the shares still follow the weights. The same seed gives the same
steps and kinds, so an unattended run is attacked at random but reproducibly, and a new
supervisor (a restart of the whole tree, ``memtui resume``) goes on with the same schedule
by skipping what lies behind it: ``next_after(config, step)``. Torch-free.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import NamedTuple

from engine.chaos.config import ChaosConfig


class Scheduled(NamedTuple):
    step: int
    """The optimizer step it is drawn for (injected at the first step at or after it)."""
    kind: str


def schedule(config: ChaosConfig) -> Iterator[Scheduled]:
    """Every scheduled injection in step order (endless); nothing while ``kinds`` is empty."""
    if not config.kinds:
        return
    rng = random.Random(config.seed)
    deck = _deck(config)
    step = 0
    while True:
        rng.shuffle(deck)
        for kind in deck:
            step += max(1, round(rng.expovariate(1.0 / config.every_steps)))
            yield Scheduled(step, kind)


MAX_COPIES = 100
"""Copies of one kind in a deck: bounds a deck when weights differ by orders of magnitude."""


def _deck(config: ChaosConfig) -> list[str]:
    """One deck in the config's kind order: each kind ``round(weight / lightest)`` times."""
    lightest = min(config.kinds.values())
    deck: list[str] = []
    for kind, weight in config.kinds.items():
        deck += [kind] * min(MAX_COPIES, max(1, round(weight / lightest)))
    return deck


def next_after(config: ChaosConfig, step: int) -> Scheduled | None:
    """The first scheduled injection at a step after ``step``; None while ``kinds`` is empty."""
    for scheduled in schedule(config):
        if scheduled.step > step:
            return scheduled
    return None
