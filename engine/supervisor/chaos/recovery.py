"""Whether the run recovered from each chaos injection: the signals, and the verdicts.

Each accepted injection is tracked from ``chaos_injected`` until a verdict, which becomes a
``chaos_recovered`` event with the same chaos id: recovered when the run shows it is healthy
again, or not recovered at ``recovery_timeout_s`` (or when the run ends first). The tracker
only reads what the supervisor already sees (the trainer's steps and the recorded events)
and is given the time, so its decisions are tested without processes. Each kind's own
signal is its contract's (``engine.chaos.kinds``: ``step_shows``, ``event_shows``,
``applied_shows``, ``releases``, ``settled``); what holds for every kind is here:

- a trainer kind whose trainer died before applying it: the run is healthy again when a
  newer attempt trains (the detail says it was never applied);
- a kind owned by the trainer (its effect lives in that process, e.g. ballast, failing
  saves): a newer attempt training than the one that held it;
- a kind the supervisor decides itself (``resolve``): when it performs it;
- a new supervisor (after the whole process tree was killed) takes up the injections its
  predecessor left without a verdict by replaying the stored events (``replay``), then goes
  on as above.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.chaos.kind import ChaosKind, CheckpointNews, Pending, Saved
from engine.chaos.table import kind_of
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
from engine.supervisor.chaos.performer import performers

__all__ = ["Pending", "RecoveryTracker", "pending_of"]


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
        news = news_of(event)
        for pending in list(self.pending.values()):
            detail = self._event_shows(pending, news)
            if detail is not None:
                verdicts.append(self._verdict(pending, True, now, _step_of(event), detail))
        return verdicts

    def _applied(self, applied: ChaosApplied, now: float, attempt: int | None) -> list[ChaosRecovered]:
        pending = self.pending.get(applied.chaos_id)
        if pending is None:
            return []
        pending.applied_step = applied.step
        pending.applied_attempt = attempt
        model = kind_of(pending.kind)
        detail = model.applied_shows(pending, applied.step) if model is not None else None
        if model is None or detail is None:
            return []
        verdicts = [self._verdict(pending, True, now, applied.step, detail)]
        for held in list(self.pending.values()):  # e.g. ballast held until a release
            if model.releases(held):
                verdicts.append(
                    self._verdict(held, True, now, applied.step, f"{detail} ({applied.chaos_id})")
                )
        return verdicts

    def _event_shows(self, pending: Pending, news: CheckpointNews) -> str | None:
        if news.saved is not None:
            pending.saved_after.append(news.saved.step)
        model = kind_of(pending.kind)
        return model.event_shows(pending, news) if model is not None else None

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
            model = kind_of(pending.kind)
            settled = model.settled(pending, state) if model is not None else None
            if settled is not None:
                step = pending.saved_after[-1] if pending.saved_after else None
                verdicts.append(self._verdict(pending, True, now, step, settled))
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
    performer = performers().get(injected.kind)
    if performer is not None:
        performer.taken_up(pending, injected)
    return pending


def _step_shows(pending: Pending, sample: TelemetrySample) -> str | None:
    """What ``sample`` shows about ``pending``'s recovery (None: nothing yet)."""
    model = kind_of(pending.kind)
    if model is None or model.performer == "trainer":
        verdict = _trainer_gone(pending, sample, model)
        if verdict is not None or pending.applied_step is None or model is None:
            return verdict
    return model.step_shows(pending, sample)


def _trainer_gone(pending: Pending, sample: TelemetrySample, model: type[ChaosKind] | None) -> str | None:
    """A trainer kind's trainer ended before it applied it, or while it held its effect."""
    if pending.applied_step is None:
        if sample.attempt > pending.attempt:
            return f"never applied: attempt {pending.attempt} ended first; attempt {sample.attempt} trains"
        return None
    held_by = pending.applied_attempt
    owned = model is not None and model.owned_by_the_trainer
    if owned and held_by is not None and sample.attempt > held_by:
        return f"attempt {held_by}, which held it, ended; attempt {sample.attempt} trains without it"
    return None


def news_of(event: Event) -> CheckpointNews:
    """What ``event`` says of the checkpoints, for the kinds' ``event_shows``."""
    saved = CheckpointSaved.of(event)
    rejected = CheckpointRejected.of(event)
    loaded = CheckpointLoaded.of(event)
    return CheckpointNews(
        saved=Saved(saved.tag, saved.step) if saved is not None else None,
        failed=CheckpointFailed.of(event) is not None,
        rejected=(rejected.tag, rejected.problem) if rejected is not None else None,
        loaded=(loaded.tag, tuple(loaded.skipped)) if loaded is not None else None,
    )


def _step_of(event: Event) -> int | None:
    step = event.data.get("step")
    return step if isinstance(step, int) else None
