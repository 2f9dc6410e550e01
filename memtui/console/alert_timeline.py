"""Alerts as episodes: each time a rule fired, until it resolved (or still firing).

The supervisor records an alert as ``alert`` events (``engine.alerts.rules``): one when a rule
fires, reminders while it stays firing, one ``resolved`` when it clears. The alert list
shows one row per episode, not per event: when it began, its worst severity, its newest
message, how many reminders came, and how long it fired. Pure functions of events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from engine.domain import Event
from engine.events import HEARTBEAT_RULE, INSTANT_RULES, StacksCollected
from memtui.console.alert_state import ALERT_EVENT, alert_rule, is_resolved

SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class AlertEpisode:
    """One rule's alert from firing to resolved. Times are Unix seconds."""

    rule: str
    severity: str
    """The worst severity it fired with (a resolution alone: that event's)."""
    message: str
    """The newest firing message (a resolution alone: its own)."""
    started_at: float | None
    """When it fired; None when only its resolution is known (the firing is older than what we hold)."""
    ended_at: float | None = None
    """When it resolved; None while it is firing."""
    reminders: int = 0
    """Firing alerts after the first (the rule repeats itself while it stays firing)."""
    last_at: float = 0.0
    """Its newest event's time."""
    where: tuple[str, ...] = ()
    """Where each rank was when its stacks were collected during the episode (the heartbeat's
    ``stacks_collected``): ``rank 0: engine/trainer/loop.py:236 in train_step``."""

    @property
    def firing(self) -> bool:
        return self.ended_at is None

    def duration_s(self, now: float) -> float | None:
        """Seconds it fired: until now while firing, until resolved after; None if unknown."""
        if self.started_at is None:
            return None
        return max(0.0, (self.ended_at if self.ended_at is not None else now) - self.started_at)


def alert_episodes(events: Iterable[Event]) -> list[AlertEpisode]:
    """Episodes of the ``alert`` events in ``events`` (seq order): firing ones first, the most
    severe first among them, then the rest by their newest event, newest first."""
    open_: dict[str, AlertEpisode] = {}
    done: list[AlertEpisode] = []
    for event in events:
        stacks = StacksCollected.of(event)
        if stacks is not None and HEARTBEAT_RULE in open_:  # a hang's too: the heartbeat fires first
            open_[HEARTBEAT_RULE] = dataclasses.replace(open_[HEARTBEAT_RULE], where=rank_places(stacks))
        if event.type != ALERT_EVENT:
            continue
        rule = alert_rule(event)
        episode = open_.pop(rule, None)
        if rule in INSTANT_RULES:  # a restart happened and is over: never "firing"
            done.append(dataclasses.replace(_fired(None, event, rule), ended_at=event.ts))
        elif is_resolved(event):
            done.append(_resolved(episode, event, rule))
        else:
            open_[rule] = _fired(episode, event, rule)
    firing = sorted(open_.values(), key=lambda e: (-SEVERITY_RANK.get(e.severity, 0), -e.last_at))
    return [*firing, *sorted(done, key=lambda e: -e.last_at)]


def rank_places(stacks: StacksCollected) -> tuple[str, ...]:
    """One line per rank: where its dump says it is, a stopped or silent rank said so."""
    places = [
        f"rank {rank}: {frame}" + (" (was stopped)" if int(rank) in stacks.stopped else "")
        for rank, frame in sorted(stacks.where.items(), key=lambda item: int(item[0]))
    ]
    return (*places, *(f"rank {rank}: no stacks came" for rank in stacks.silent))


def _fired(episode: AlertEpisode | None, event: Event, rule: str) -> AlertEpisode:
    message = event.message or rule
    if episode is None:
        return AlertEpisode(rule, event.severity, message, started_at=event.ts, last_at=event.ts)
    worst = max(episode.severity, event.severity, key=lambda s: SEVERITY_RANK.get(s, 0))
    return dataclasses.replace(
        episode, severity=worst, message=message, reminders=episode.reminders + 1, last_at=event.ts
    )


def _resolved(episode: AlertEpisode | None, event: Event, rule: str) -> AlertEpisode:
    if episode is None:
        return AlertEpisode(
            rule, event.severity, event.message or rule, started_at=None, ended_at=event.ts, last_at=event.ts
        )
    return dataclasses.replace(episode, ended_at=event.ts, last_at=event.ts)
