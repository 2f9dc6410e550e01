"""The trainer's start-up, said phase by phase over its link (``engine.events.startup``).

``StartupPhases.enter`` records a ``startup_phase`` event as the trainer enters each phase
(importing, building or waiting for a DeepSpeed op, initialising, loading a checkpoint, the
first step) and logs it with the seconds since the process began, so the trainer's log
holds the same account. Torch-free itself (``op_cache`` imports torch only when it loads an op): ``__main__``
uses it before torch is imported.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from engine.events import PhaseName, StartupPhase
from engine.trainer.link import Link
from engine.trainer.op_cache import LOCK_FILE, OpState

log = logging.getLogger(__name__)


class StartupPhases:
    """Says each phase of one attempt's start-up on ``link`` (rank 0's; others say nothing)."""

    def __init__(self, link: Link, attempt: int) -> None:
        self.link = link
        self.attempt = attempt
        self.began = time.monotonic()
        self.current: PhaseName | None = None

    def enter(self, phase: PhaseName, **details: Any) -> None:
        """Record that the trainer enters ``phase``; ``details``: op, cache, lock, holder, tag."""
        payload = StartupPhase(phase=phase, attempt=self.attempt, **details)
        self.current = phase
        label = payload.label()
        if phase == "building_op" and payload.cache:
            label += f"; cached in {payload.cache} for later runs"
        elif phase == "waiting_for_build" and payload.lock:
            label += f" (lock {payload.lock})"
        log.info("start-up at %.1f s: %s", time.monotonic() - self.began, label)
        self.link.event(payload, label)

    def op(self, state: OpState) -> None:
        """As a DeepSpeed op loads (before, and whenever its load turns out to do something
        else): building it now, or waiting for another process's build; nothing for one
        found built (its load takes a moment, unless a build is seen later)."""
        if state.built and not state.locked:
            return
        lock = str(Path(state.directory) / LOCK_FILE) if state.locked else None
        phase: PhaseName = "waiting_for_build" if state.locked else "building_op"
        holder = state.holder if state.locked else None
        self.enter(phase, op=state.name, cache=state.directory, lock=lock, holder=holder)
