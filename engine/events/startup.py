"""A trainer's start-up, phase by phase: what it is doing before its first step.

A trainer's first step comes tens of seconds to minutes after its launch: importing torch
and DeepSpeed, building a DeepSpeed op the first time an environment needs it (a C++ compile,
once per environment, kept in its extension cache: ``engine.extension_cache``), or whenever
torch finds the cached build stale, or waiting for another process that
builds it (torch's build lock), initialising DeepSpeed, loading a checkpoint. The trainer
records ``startup_phase`` as it enters each phase; the phase lasts until the next one, or
until the attempt's first step. The supervisor keeps the newest in its status and consoles
fold it from the events they replay, so one attaching late sees the phase and when it began.
Torch-free.
"""

from __future__ import annotations

from typing import Literal

from engine.domain import Event
from engine.events.payload import Payload
from engine.events.rendezvous import NodesJoined, RendezvousWait

PhaseName = Literal[
    "waiting_for_nodes",  # several nodes: said by the supervisor while torchrun waits at the rendezvous
    "importing",
    "building_op",
    "waiting_for_build",
    "initialising",
    "loading_checkpoint",
    "first_step",
]
"""In the order a trainer enters them; ``building_op`` and ``waiting_for_build`` while an op
is built or another process's build of it waited for (whatever the cache held),
``loading_checkpoint`` only when resuming."""


class StartupPhase(Payload):
    """The trainer enters a start-up phase (until the next one or its first step)."""

    event_type = "startup_phase"
    origin = "trainer"
    phase: PhaseName
    attempt: int
    op: str | None = None
    """The DeepSpeed op being built or waited for (``cpu_adam``...)."""
    cache: str | None = None
    """The op's build directory: what the build leaves for every later run in this environment."""
    lock: str | None = None
    """``waiting_for_build``: the lock file another process holds while it builds."""
    holder: int | None = None
    """``waiting_for_build``: the pid of the memtui process that builds, when known."""
    tag: str | None = None
    """``loading_checkpoint``: the checkpoint's tag."""
    rendezvous: RendezvousWait | None = None
    """``waiting_for_nodes``: the endpoint, the id, the nodes joined so far."""

    def label(self) -> str:
        """The phase in a few words, for a header, a panel or ``memtui status``."""
        op = self.op or "an op"
        whose = f"process {self.holder}'s" if self.holder else "another process's"
        labels: dict[str, str] = {
            "importing": "importing torch and DeepSpeed",
            "building_op": f"building DeepSpeed op {op} (once per environment)",
            "waiting_for_build": f"waiting for {whose} build of {op}",
            "initialising": "initialising DeepSpeed",
            "loading_checkpoint": f"loading checkpoint {self.tag or ''}".rstrip(),
            "first_step": "first step",
        }
        if self.phase == "waiting_for_nodes":
            return self.rendezvous.label() if self.rendezvous else "waiting for the other nodes"
        return labels[self.phase]


def nodes_met(event: Event, startup: Event | None) -> bool:
    """``event`` (``nodes_joined``) ends ``startup``, a ``waiting_for_nodes`` phase: on a node
    whose ranks say nothing to its supervisor no later phase would."""
    phase = StartupPhase.of(startup) if startup is not None else None
    return event.type == NodesJoined.event_type and phase is not None and phase.phase == "waiting_for_nodes"
