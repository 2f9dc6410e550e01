"""Whether the run recovered from each chaos injection: the signals, and the verdicts.

Each accepted injection is tracked from ``chaos_injected`` until a verdict, which becomes a
``chaos_recovered`` event with the same chaos id: recovered when the run shows it is healthy
again, or not recovered at ``recovery_timeout_s`` (or when the run ends first). The tracker
only reads what the supervisor already sees (the trainer's steps and the recorded events)
and is given the time, so its decisions are tested without processes. The signals:

- ``kill``, ``preempt``: a step reported by a newer attempt than the one hit. A preemption
  the run is not restarted after counts as recovered when a checkpoint was saved after it
  (the final save) and the run then ended without failing.
- ``oom``: any step reported after the trainer's ``chaos_applied`` (the step was retried,
  adapted, or the attempt restarted).
- ``nan_loss``, ``overflow``: a step at or after the burst (applied step + K) with a finite
  loss and no overflow; ``spike``: likewise, a step after the poisoned one (which telemetry
  numbers applied step + 1).
- ``slow_steps``, ``ballast`` with steps > 0: a step at or after applied step + K.
- ``ballast`` with steps = 0: a later ``release`` applied; ``release``: its own
  ``chaos_applied``.
- ``disk_full``: a ``checkpoint_saved`` after at least K ``checkpoint_failed`` following the
  ``chaos_applied``; or, like ``ballast``, a newer attempt training than the one that held it
  (a kill or a restart of the whole tree ends the trainer's state before the count ran out).
- ``corrupt_checkpoint``: the corrupted tag rejected (``checkpoint_rejected`` for it, or
  named among a load's skipped tags), or a newer checkpoint saved.
- ``drop_consoles``, ``planner_storm``: decided by the supervisor when it performs them
  (``resolve``): how many consoles were closed; every directive refused and none applied.
- a new supervisor (after the whole process tree was killed) takes up the injections its
  predecessor left without a verdict by replaying the stored events (``replay``), then goes
  on as above: a kill is recovered when the resumed run's attempt trains.
- a trainer kind whose trainer died before applying it: the run is healthy again when a
  newer attempt trains (the detail says it was never applied).
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.chaos_kinds import REQUESTS
from engine.checkpoints.catalog import TAG_PATTERN
from engine.domain import Event, TelemetrySample
from engine.events import (
    ChaosApplied,
    ChaosInjected,
    ChaosRecovered,
    CheckpointFailed,
    CheckpointLoaded,
    CheckpointRejected,
    CheckpointSaved,
)

OWNED_BY_THE_TRAINER = frozenset({"disk_full", "ballast"})
"""Kinds whose effect lives in the trainer process until a count runs out (saves that fail,
ballast until a release): a restart ends them, so a newer attempt training is the recovery."""
SUPERVISOR_KINDS = frozenset(kind for kind, model in REQUESTS.items() if model.performer == "supervisor")


@dataclass
class Pending:
    """One injection waiting for its verdict."""

    chaos_id: str
    kind: str
    params: dict[str, Any]
    at: float
    """Time of the injection (s since the epoch)."""
    attempt: int
    """The trainer attempt running when it was injected."""
    target: str | None = None
    """corrupt_checkpoint: the tag whose bytes were flipped."""
    target_step: int | None = None
    applied_step: int | None = None
    """The step the trainer says it applies from (``chaos_applied``)."""
    applied_attempt: int | None = None
    """The trainer attempt that applied it (its state dies with that process)."""
    failed_saves: int = 0
    saved_after: list[int] = field(default_factory=list)
    """Steps of checkpoints saved after the injection."""

    def burst(self) -> int:
        """Steps the injection lasts (K), 0 for kinds without a length."""
        return int(self.params.get("steps") or 0)


class RecoveryTracker:
    """The injections without a verdict yet, and the decisions about them."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.pending: dict[str, Pending] = {}

    def injected(self, pending: Pending) -> None:
        self.pending[pending.chaos_id] = pending

    def replay(self, events: Iterable[Event]) -> list[ChaosRecovered]:
        """Take up a previous supervisor's injections still without a verdict (it died with
        the whole process tree): its stored events, oldest first, as it saw them; returns the
        verdicts they already show that it did not get to record."""
        verdicts: dict[str, ChaosRecovered] = {}
        for event in events:
            injected = ChaosInjected.of(event)
            if injected is not None:
                self.injected(pending_of(injected, event))
            elif event.type == ChaosRecovered.event_type:
                # stored after the event that showed it: a verdict the replay just reached
                # again was recorded already
                chaos_id = str(event.data.get("chaos_id"))
                self.pending.pop(chaos_id, None)
                verdicts.pop(chaos_id, None)
            else:
                verdicts.update((v.chaos_id, v) for v in self.on_event(event, event.ts))
        return list(verdicts.values())

    def resolve(self, chaos_id: str, recovered: bool, now: float, detail: str) -> list[ChaosRecovered]:
        """A verdict the supervisor decided itself (drop_consoles, planner_storm)."""
        pending = self.pending.get(chaos_id)
        return [] if pending is None else [self._verdict(pending, recovered, now, None, detail)]

    # ------------------------------------------------------------------ the signals

    def on_step(self, sample: TelemetrySample, now: float) -> list[ChaosRecovered]:
        verdicts = []
        for pending in list(self.pending.values()):
            detail = _step_shows(pending, sample)
            if detail is not None:
                verdicts.append(self._verdict(pending, True, now, sample.step, detail))
        return verdicts

    def on_event(self, event: Event, now: float) -> list[ChaosRecovered]:
        applied = ChaosApplied.of(event)
        if applied is not None:
            return self._applied(applied, now, event.attempt)
        verdicts = []
        for pending in list(self.pending.values()):
            detail = self._event_shows(pending, event)
            if detail is not None:
                verdicts.append(self._verdict(pending, True, now, _step_of(event), detail))
        return verdicts

    def _applied(self, applied: ChaosApplied, now: float, attempt: int | None) -> list[ChaosRecovered]:
        pending = self.pending.get(applied.chaos_id)
        if pending is None:
            return []
        pending.applied_step = applied.step
        pending.applied_attempt = attempt
        if pending.kind != "release":
            return []
        verdicts = [self._verdict(pending, True, now, applied.step, f"released at step {applied.step}")]
        for held in list(self.pending.values()):  # ballast held until a release
            if held.kind == "ballast" and held.burst() == 0 and held.applied_step is not None:
                detail = f"released at step {applied.step} ({applied.chaos_id})"
                verdicts.append(self._verdict(held, True, now, applied.step, detail))
        return verdicts

    def _event_shows(self, pending: Pending, event: Event) -> str | None:
        saved = CheckpointSaved.of(event)
        if saved is not None:
            pending.saved_after.append(saved.step)
        if pending.kind == "disk_full" and pending.applied_step is not None:
            if CheckpointFailed.of(event) is not None:
                pending.failed_saves += 1
            elif saved is not None and pending.failed_saves >= int(pending.params.get("saves", 1)):
                return f"{pending.failed_saves} saves failed, then {saved.tag} saved"
        if pending.kind == "corrupt_checkpoint":
            return _corruption_caught(pending, event, saved)
        return None

    # ------------------------------------------------------------------ deadlines

    def expired(self, now: float) -> list[ChaosRecovered]:
        """Verdicts (not recovered) for injections past ``timeout_s``."""
        late = [p for p in self.pending.values() if now - p.at >= self.timeout_s]
        detail = f"no sign of recovery within {self.timeout_s:g} s"
        return [self._verdict(p, False, now, None, detail) for p in late]

    def settle(self, state: str, now: float) -> list[ChaosRecovered]:
        """The run ends (``state``): a verdict for every injection still waiting."""
        verdicts = []
        for pending in list(self.pending.values()):
            if pending.kind == "preempt" and pending.saved_after and state != "failed":
                detail = f"the run ended {state} after a final save at step {pending.saved_after[-1]}"
                verdicts.append(self._verdict(pending, True, now, pending.saved_after[-1], detail))
            else:
                detail = f"the run ended {state} before it recovered"
                verdicts.append(self._verdict(pending, False, now, None, detail))
        return verdicts

    def _verdict(
        self, pending: Pending, recovered: bool, now: float, step: int | None, detail: str
    ) -> ChaosRecovered:
        del self.pending[pending.chaos_id]
        seconds = max(0.0, now - pending.at)
        return ChaosRecovered(
            chaos_id=pending.chaos_id,
            kind=pending.kind,
            recovered=recovered,
            seconds=round(seconds, 3),
            step=step,
            detail=detail,
        )


def pending_of(injected: ChaosInjected, event: Event) -> Pending:
    """The tracking of a stored ``chaos_injected`` (``event``)."""
    pending = Pending(injected.chaos_id, injected.kind, injected.params, event.ts, event.attempt or 0)
    if injected.kind == "corrupt_checkpoint" and injected.target:
        pending.target = injected.target.split("/")[0]
        found = TAG_PATTERN.match(pending.target)
        pending.target_step = int(found.group(1)) if found else None
    return pending


def _step_shows(pending: Pending, sample: TelemetrySample) -> str | None:
    """What ``sample`` shows about ``pending``'s recovery (None: nothing yet)."""
    kind, applied = pending.kind, pending.applied_step
    if kind in ("kill", "preempt"):
        if sample.attempt > pending.attempt:
            return f"attempt {sample.attempt} reported step {sample.step}"
        return None
    if applied is None:
        if sample.attempt > pending.attempt and kind not in SUPERVISOR_KINDS:
            return f"never applied: attempt {pending.attempt} ended first; attempt {sample.attempt} trains"
        return None
    if kind == "oom":  # applied at the boundary before the step that ran out of memory
        oomed = applied + 1  # that step as telemetry numbers it: the one redone
        how = (
            "trained, redone after its OOM"
            if sample.step == oomed
            else f"trained after the OOM in step {oomed}"
        )
        return f"step {sample.step} {how}"
    held_by = pending.applied_attempt
    if kind in OWNED_BY_THE_TRAINER and held_by is not None and sample.attempt > held_by:
        return f"attempt {held_by}, which held it, ended; attempt {sample.attempt} trains without it"
    end = applied + (2 if kind == "spike" else pending.burst())  # a spike: the step after the poisoned one
    if kind in ("nan_loss", "overflow", "spike"):
        if sample.step >= end and math.isfinite(sample.loss) and not sample.overflow:
            return f"step {sample.step}: finite loss {sample.loss:.4g}, no overflow"
        return None
    lasting = kind == "slow_steps" or (kind == "ballast" and pending.burst() > 0)
    if lasting and sample.step >= end:
        return f"step {sample.step} reached, {pending.burst()} steps after step {applied}"
    return None


def _corruption_caught(pending: Pending, event: Event, saved: CheckpointSaved | None) -> str | None:
    tag = pending.target
    rejected = CheckpointRejected.of(event)
    if rejected is not None and rejected.tag == tag:
        return f"{tag} rejected: {rejected.problem}"
    loaded = CheckpointLoaded.of(event)
    if loaded is not None and any(s.split(":")[0] == tag for s in loaded.skipped):
        return f"{tag} skipped on load; {loaded.tag} loaded"
    if saved is not None and pending.target_step is not None and saved.step > pending.target_step:
        return f"a newer checkpoint {saved.tag} saved"
    return None


def _step_of(event: Event) -> int | None:
    step = event.data.get("step")
    return step if isinstance(step, int) else None
