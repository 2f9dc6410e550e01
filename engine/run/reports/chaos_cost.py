"""What failures cost a run, from its store alone: outages, replays and slowed steps.

- **Outage**, per restart: from the last step stored before it to the first step stored
  after it (a trainer dying, a new one starting, loading and verifying its checkpoint).
- **Replay**, per restart: the steps the resumed attempt trained again (at or below the
  newest step any earlier attempt reached), and their step times; the first one is inside
  the outage already.
- **Aftermath**, per restart: its steps from its first step until the spare trainer started
  behind it is ready or lost (``standby_ready``, ``standby_lost``), and their time beyond as
  many steps of the run's median: a step faster than the median offsets a slower one, so
  the ordinary spread of step times nets out (counting only the slower steps' excess gave a
  chaos-free run 0.67 s per 450 steps of "aftermath", median of its windows, on the 2-core
  machine). Never below 0. A spare's warm-up imports
  torch and DeepSpeed; on a CPU host those seconds are the trainer's (a 45 ms step of
  ``tiny`` took about 1.5 s while one ran, on 2 cores), so a recovery that hands over in
  0.4 s pays more after it. Without a standby there is none. Replayed steps are counted as
  replay only.
- **Slowed steps**: steps slower than the run's median step while a chaos effect lasted
  (from ``chaos_injected`` to its ``chaos_recovered``), each costing its excess over the
  median; replayed steps and a restart's aftermath are counted there only.

A restart's ``cause`` is the newest chaos injection whose effect lasted until the first
step after it (a kill is recovered by that step), if any (a crash or a whole-tree kill
has none). Attempts follow one another in the steps table, so each
attempt's rows are one run of row ids. Torch-free; read-only.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from engine.events import ChaosInjected, ChaosRecovered
from engine.run.storage.store import Store
from engine.run.storage.stored_events import payloads_of


class RestartCost(BaseModel):
    """One resumed attempt's share of the cost. Seconds."""

    model_config = ConfigDict(extra="forbid")

    attempt: int
    cause: str | None = None
    """The chaos kind that caused it; None: not chaos (a crash, a whole-tree kill)."""
    outage_s: float
    """The last step stored before the restart to the first one after it."""
    steps_replayed: int
    replay_s: float
    """Step times of the replayed steps but the first (inside the outage)."""
    steps_aftermath: int = 0
    """Its steps until its replacement spare was ready (replays not counted)."""
    aftermath_s: float = 0.0
    """Their time beyond as many median steps (at least 0)."""


class ChaosCost(BaseModel):
    """Outages and replays per restart, and the steps chaos slowed. Seconds."""

    model_config = ConfigDict(extra="forbid")

    restarts: list[RestartCost] = Field(default_factory=list)
    median_step_s: float | None = None
    """The run's median step time, the yardstick of a slowed step."""
    steps_slowed: int = 0
    slowed_s: float = 0.0
    """Time beyond the median of the steps slower than it while a chaos effect lasted."""

    @property
    def outage_s(self) -> float:
        return sum(r.outage_s for r in self.restarts)

    @property
    def replay_s(self) -> float:
        return sum(r.replay_s for r in self.restarts)

    @property
    def steps_replayed(self) -> int:
        return sum(r.steps_replayed for r in self.restarts)

    @property
    def aftermath_s(self) -> float:
        return sum(r.aftermath_s for r in self.restarts)

    @property
    def total_s(self) -> float:
        return self.outage_s + self.replay_s + self.aftermath_s + self.slowed_s

    def totals(self) -> dict[str, float | int]:
        """The derived figures, for the JSON document."""
        return {
            "outage_s": self.outage_s,
            "replay_s": self.replay_s,
            "steps_replayed": self.steps_replayed,
            "aftermath_s": self.aftermath_s,
            "total_s": self.total_s,
        }


@dataclass(frozen=True)
class _Attempt:
    attempt: int
    first_id: int
    last_id: int
    reached_before: int | None
    """The newest step of the attempts before it; None for the first."""


def chaos_cost(store: Store) -> ChaosCost:
    """The run's outages, replays, aftermaths and slowed steps (see the module's docstring)."""
    attempts = _attempts(store)
    injected = _injections(store)
    restarts = [_restart(store, a, attempts[i - 1], injected) for i, a in enumerate(attempts) if i]
    median = _median_step_s(store)
    if median is None:
        return ChaosCost(restarts=restarts)
    after = _aftermath_windows(store, attempts)
    for restart, window in zip(restarts, after, strict=True):
        excess = _excess(store, median, attempts, [window] if window else [], net=True)
        restart.steps_aftermath, restart.aftermath_s = len(excess), max(0.0, sum(excess))
    slowed = _excess(store, median, attempts, _windows(injected), outside=[w for w in after if w])
    return ChaosCost(restarts=restarts, median_step_s=median, steps_slowed=len(slowed), slowed_s=sum(slowed))


def _attempts(store: Store) -> list[_Attempt]:
    rows = store.query(
        "SELECT attempt, MIN(id), MAX(id), MAX(step) FROM steps GROUP BY attempt ORDER BY attempt"
    )
    found, reached = [], None
    for attempt, first_id, last_id, top in rows:
        found.append(_Attempt(int(attempt), int(first_id), int(last_id), reached))
        reached = int(top) if reached is None else max(reached, int(top))
    return found


def _restart(store: Store, attempt: _Attempt, before: _Attempt, injected: list[_Injection]) -> RestartCost:
    (ended,) = store.query("SELECT ts FROM steps WHERE id = ?", (before.last_id,))[0]
    (began,) = store.query("SELECT ts FROM steps WHERE id = ?", (attempt.first_id,))[0]
    n, replay_s = store.query(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN id > ? THEN step_time_s ELSE 0 END), 0)"
        " FROM steps WHERE id BETWEEN ? AND ? AND step <= ?",
        (attempt.first_id, attempt.first_id, attempt.last_id, attempt.reached_before),
    )[0]
    cause = next((i.kind for i in reversed(injected) if i.ts <= began <= i.until), None)
    return RestartCost(
        attempt=attempt.attempt,
        cause=cause,
        outage_s=max(0.0, float(began) - float(ended)),
        steps_replayed=int(n),
        replay_s=float(replay_s),
    )


@dataclass(frozen=True)
class _Injection:
    kind: str
    ts: float
    until: float
    """When its ``chaos_recovered`` came; without one, the newest stored step."""


def _injections(store: Store) -> list[_Injection]:
    """Every injection and how long its effect lasted, in order."""
    ended: dict[str, float] = {}
    for event, verdict in payloads_of(store, ChaosRecovered):
        ended.setdefault(verdict.chaos_id, event.ts)
    (last,) = store.query("SELECT COALESCE(MAX(ts), 0) FROM steps")[0]
    return [
        _Injection(p.kind, e.ts, ended.get(p.chaos_id, max(e.ts, float(last))))
        for e, p in payloads_of(store, ChaosInjected)
    ]


def _windows(injected: list[_Injection]) -> list[tuple[float, float]]:
    """(from, to) of every chaos effect, merged where they overlap, in order."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted((i.ts, i.until) for i in injected):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _median_step_s(store: Store) -> float | None:
    (n,) = store.query("SELECT COUNT(*) FROM steps WHERE step_time_s IS NOT NULL")[0]
    if not n:
        return None
    middle = store.query(
        "SELECT step_time_s FROM steps WHERE step_time_s IS NOT NULL ORDER BY step_time_s LIMIT ? OFFSET ?",
        (2 - n % 2, (n - 1) // 2),
    )
    return sum(float(v) for (v,) in middle) / len(middle)


def _aftermath_windows(store: Store, attempts: list[_Attempt]) -> list[tuple[float, float] | None]:
    """Per restart (every attempt but the first): from its first step to the first
    ``standby_ready`` or ``standby_lost`` after it, within its own steps; None without one."""
    spares = [
        float(ts) for (ts,) in store.query(
            "SELECT ts FROM events WHERE type IN ('standby_ready', 'standby_lost') ORDER BY ts"
        )
    ]  # fmt: skip
    windows: list[tuple[float, float] | None] = []
    for attempt in attempts[1:]:
        (began,), (ended,) = (
            store.query("SELECT ts FROM steps WHERE id = ?", (row,))[0]
            for row in (attempt.first_id, attempt.last_id)
        )
        ready = bisect.bisect_right(spares, float(began))
        windows.append((float(began), min(spares[ready], float(ended))) if ready < len(spares) else None)
    return windows


def _excess(
    store: Store,
    median: float,
    attempts: list[_Attempt],
    windows: list[tuple[float, float]],
    outside: Sequence[tuple[float, float]] = (),
    net: bool = False,
) -> list[float]:
    """Excess over ``median`` of each slow step inside one of ``windows`` (merged, in order)
    and in none of ``outside``, that is not a replay; ``net``: of every such step, a faster
    one's negative."""
    if not windows:
        return []
    floor = float("-inf") if net else median
    starts = [w[0] for w in windows]
    firsts = [a.first_id for a in attempts]
    excess = []
    for row_id, step, ts, took in store.query(
        "SELECT id, step, ts, step_time_s FROM steps WHERE step_time_s > ? AND ts BETWEEN ? AND ?",
        (floor, windows[0][0], windows[-1][1]),
    ):
        window = bisect.bisect_right(starts, ts) - 1
        if window < 0 or ts > windows[window][1] or any(a <= ts <= b for a, b in outside):
            continue
        attempt = attempts[bisect.bisect_right(firsts, row_id) - 1]
        if attempt.reached_before is not None and step <= attempt.reached_before:
            continue  # a replayed step: counted as replay
        excess.append(float(took) - median)
    return excess
