"""``EvalSummary``: the newest eval of a run as ``memtui status --json`` and the supervisor's
status answer carry it (``engine.domain.RunStatus.last_eval``). Torch-free."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvalSummary(BaseModel):
    """The newest ``eval_completed`` of a run: where and what it measured."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    step: int
    """Optimizer steps done when the eval ran."""
    loss: float
    """Mean held-out loss over every rank's batches."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """The workload's own scalars of that eval."""
    batches: int = 0
    seconds: float = 0.0
    """Wall seconds the eval held training."""
    attempt: int | None = None
    """The trainer attempt that ran it."""
