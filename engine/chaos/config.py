"""The run's ``[chaos]`` section: scheduled chaos, kinds from the table with weights."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.chaos.table import KINDS


def default_kinds() -> dict[str, float]:
    """The schedule ``memtui endure`` draws from when a run names no kinds: every kind that
    is ``scheduled_by_default``, weight 1."""
    return {kind: 1.0 for kind, model in KINDS.items() if model.scheduled_by_default}


class ChaosConfig(BaseModel):
    """Scheduled chaos: an unattended run attacked at random, but reproducibly.

    Every ``every_steps`` optimizer steps on average a kind drawn by ``kinds``' weights is
    injected with its default parameters; the schedule is a function of ``seed`` alone, so
    the same seed attacks the same steps with the same kinds. Off while ``kinds`` is empty."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    kinds: dict[str, float] = Field(default_factory=dict)
    """Kind -> weight (relative, > 0), e.g. ``{kill = 1, nan_loss = 2}``; empty: no schedule."""
    every_steps: int = Field(1000, ge=1, le=10**9)
    """Mean optimizer steps between two scheduled injections."""
    seed: int = Field(0, ge=0, le=2**31 - 1)
    """Seeds the schedule (which steps, which kinds)."""
    recovery_timeout_s: float = Field(600.0, gt=0.0, le=7 * 86400.0)
    """Seconds an injection may take to recover before ``chaos_recovered`` says it did not."""

    @model_validator(mode="after")
    def _kinds_known_weights_positive(self) -> ChaosConfig:
        for kind, weight in self.kinds.items():
            if kind not in KINDS:
                raise ValueError(f"kinds.{kind}: not a chaos kind (choose from {', '.join(KINDS)})")
            if not weight > 0:
                raise ValueError(f"kinds.{kind}: the weight must be > 0, got {weight!r}")
        return self
