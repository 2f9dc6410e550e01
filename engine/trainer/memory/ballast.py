"""Injected memory pressure for tests and rehearsals: ballast tensors on a step schedule.

``MEMTUI_BALLAST="STEP:SIZE[,STEP:SIZE...]"`` in the trainer's environment (the supervisor
passes its environment on): from optimizer step STEP (0-based, the step about to run) on,
hold SIZE bytes of ballast on the training device; SIZE takes K, M or G (powers of 1024);
0 releases it. The ballast is written to, so on the CPU it is resident (it shows in RSS).
``MEMTUI_BALLAST_RANK=R`` puts it on rank R alone (several ranks: one rank under pressure).
A chaos request (``ballast``, ``release``) adds to the same schedule (``Ballast.plan``).
"""

from __future__ import annotations

import os
import re

import torch

BALLAST_ENV = "MEMTUI_BALLAST"
BALLAST_RANK_ENV = "MEMTUI_BALLAST_RANK"
_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'64M' -> 67108864 bytes."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r} (use e.g. 512M)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_schedule(text: str) -> list[tuple[int, int]]:
    """'10:256M,40:0' -> [(10, 268435456), (40, 0)], ordered by step."""
    schedule = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        step, _, size = item.partition(":")
        if not size:
            raise ValueError(f"{BALLAST_ENV}: {item!r} is not STEP:SIZE")
        schedule.append((int(step), parse_size(size)))
    return sorted(schedule)


class Ballast:
    """Holds the scheduled bytes on ``device``; ``at_step`` returns the bytes held."""

    def __init__(self, schedule: list[tuple[int, int]], device: torch.device) -> None:
        self.schedule = schedule
        self.device = device
        self.held = 0
        self._tensor: torch.Tensor | None = None

    @classmethod
    def from_env(cls, device: torch.device, rank: int = 0) -> Ballast:
        only = os.environ.get(BALLAST_RANK_ENV, "").strip()
        if only and int(only) != rank:
            return cls([], device)
        return cls(parse_schedule(os.environ.get(BALLAST_ENV, "")), device)

    def plan(self, start: int, size: int, steps: int = 0) -> None:
        """From step ``start`` on hold ``size`` bytes: for ``steps`` steps, then none (0:
        until planned again). It replaces what the schedule said from ``start`` on (the
        newest word wins), and the next ``at_step`` applies it."""
        self.schedule = [(s, b) for s, b in self.schedule if s < start]
        self.schedule.append((start, size))
        if steps and size:
            self.schedule.append((start + steps, 0))

    def wanted(self, step: int) -> int:
        """Bytes the schedule asks for at ``step``."""
        size = 0
        for start, bytes_ in self.schedule:
            if start <= step:
                size = bytes_
        return size

    def at_step(self, step: int) -> int:
        size = self.wanted(step)
        if size != self.held:
            self._tensor = None  # free first: the old and the new never coexist
            if size:
                self._tensor = torch.ones(size, dtype=torch.uint8, device=self.device)  # touched: resident
            self.held = size
        return self.held
