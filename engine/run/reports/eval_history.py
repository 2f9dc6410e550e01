"""A run's evals as its store holds them (``eval_completed`` events), for the readers that
list them (``memtui export``), sum them up (``memtui report``) or cite them (the rule
planner reads the live ones). Torch-free.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.events import EvalCompleted
from engine.measures.eval_summary import EvalSummary
from engine.run.storage.store import Store

EVAL_FIELDS = ["step", "loss", "batches", "seconds", "attempt", "ts"]
"""The columns of one eval, before its metrics (``metrics.NAME``, one column each)."""
METRIC_PREFIX = "metrics."


@dataclass(frozen=True)
class StoredEval:
    """One eval and when and by which attempt it was recorded."""

    result: EvalCompleted
    ts: float
    attempt: int | None

    def row(self) -> dict[str, Any]:
        """Flat values: EVAL_FIELDS, then each metric under ``metrics.NAME``."""
        r = self.result
        flat: dict[str, Any] = {"step": r.step, "loss": r.loss, "batches": r.batches, "seconds": r.seconds}
        flat.update(attempt=self.attempt, ts=self.ts)
        return flat | {METRIC_PREFIX + name: value for name, value in r.metrics.items()}

    def summary(self) -> EvalSummary:
        """What ``status`` says of it."""
        fields = self.result.model_dump(include={"step", "loss", "metrics", "batches", "seconds"})
        return EvalSummary(**fields, attempt=self.attempt)


def stored_evals(store: Store) -> list[StoredEval]:
    """Every eval in the order recorded (a damaged row is left out, never a crash)."""
    rows = store.query(
        "SELECT ts, data, attempt FROM events WHERE type = ? ORDER BY seq", (EvalCompleted.event_type,)
    )
    evals = []
    for ts, data, attempt in rows:
        try:
            result = EvalCompleted.model_validate(json.loads(data))
        except ValueError:
            continue
        evals.append(StoredEval(result, float(ts), attempt))
    return evals


def eval_columns(evals: list[StoredEval]) -> list[str]:
    """EVAL_FIELDS and every metric column any eval has, in the order first seen."""
    names = dict.fromkeys(METRIC_PREFIX + n for e in evals for n in e.result.metrics)
    return EVAL_FIELDS + list(names)


class EvalPoint(BaseModel):
    """One eval's held-out loss and where it was measured."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    step: int
    loss: float


class EvalLosses(BaseModel):
    """A run's evals summed up: how many, their time, and the first, best and last loss."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    count: int
    seconds: float
    """Wall seconds the evals held training, all together."""
    first: EvalPoint
    best: EvalPoint
    """The lowest finite loss (the first eval's when none is finite)."""
    last: EvalPoint

    @classmethod
    def of(cls, evals: list[StoredEval]) -> EvalLosses | None:
        """None for a run without an eval."""
        if not evals:
            return None
        points = [EvalPoint(step=e.result.step, loss=e.result.loss) for e in evals]
        finite = [p for p in points if math.isfinite(p.loss)] or points[:1]
        return cls(
            count=len(evals),
            seconds=sum(e.result.seconds for e in evals),
            first=points[0],
            best=min(finite, key=lambda p: p.loss),
            last=points[-1],
        )
