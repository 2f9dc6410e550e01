"""The trainer's evals: a held-out loss measured at a step boundary, or why one was not."""

from __future__ import annotations

from pydantic import Field

from engine.events.payload import Payload


class EvalCompleted(Payload):
    """One eval: the mean held-out loss over every rank's batches, and the workload's own
    scalars of the eval (each the mean over the batches that reported it)."""

    event_type = "eval_completed"
    origin = "trainer"
    step: int
    """Optimizer steps done when the eval ran (the step of the sample just before it)."""
    loss: float
    """Mean loss over the eval's batches (every rank's)."""
    batches: int
    """Held-out batches evaluated, all ranks together."""
    seconds: float
    """Wall seconds the eval held training (rank 0's clock)."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """The workload's named scalars of the eval, screened (``engine.measures.user_metrics``)."""


class EvalSkipped(Payload):
    """An eval that did not happen: the workload has none (said once), or one ran out of
    memory (the run goes on)."""

    event_type = "eval_skipped"
    origin = "trainer"
    severity = "warning"
    step: int
    reason: str
