"""The policy's checks of a rollback: the tag verifies, it is recent enough, and rollbacks
are not repeated too often. Pure and torch-free (the caller lists the verified tags).

Judged against the newest reported step ``step``:
- the tag is one of the run's checkpoints that verify now (``verified``: tag -> step);
- it is before ``step`` (a rollback goes back) and at most ``horizon_steps`` behind it;
- ``skip_batches`` is at most ``horizon_steps`` (a skip is a bad window, not a data set);
- at most ``max_rollbacks`` in this supervisor's life, and at least ``min_gap_steps`` steps
  trained since the previous one resumed (``resumed_at``: the tag steps earlier rollbacks
  resumed from, oldest first): a run that spikes again at once needs a person, not a loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.config.run_config import PolicyConfig
from engine.rollback import Rollback


@dataclass(frozen=True)
class RollbackLimits:
    """The run's bounds on rollbacks (``policy.rollback_*``), in optimizer steps."""

    horizon_steps: int
    min_gap_steps: int
    max_rollbacks: int

    @classmethod
    def of(cls, policy: PolicyConfig) -> RollbackLimits:
        return cls(policy.rollback_horizon_steps, policy.rollback_min_gap_steps, policy.rollback_max)


def rollback_refusal(
    rollback: Rollback,
    step: int,
    verified: Mapping[str, int],
    resumed_at: Sequence[int],
    limits: RollbackLimits,
) -> str | None:
    """Why ``rollback`` is refused now, naming the field; None: it passes."""
    tag = rollback.tag
    if tag not in verified:
        return f"rollback.tag: {tag} is not a checkpoint of this run that verifies"
    tag_step = verified[tag]
    if tag_step >= step:
        return f"rollback.tag: {tag} (step {tag_step}) is not before the newest step {step}"
    if step - tag_step > limits.horizon_steps:
        return (
            f"rollback.tag: {tag} is {step - tag_step} steps behind step {step}; "
            f"the horizon is {limits.horizon_steps} (policy.rollback_horizon_steps)"
        )
    if rollback.skip_batches > limits.horizon_steps:
        return f"rollback.skip_batches: {rollback.skip_batches} is over the horizon of {limits.horizon_steps}"
    if len(resumed_at) >= limits.max_rollbacks:
        return f"rollback: {len(resumed_at)} rollbacks already (policy.rollback_max = {limits.max_rollbacks})"
    if resumed_at and step - resumed_at[-1] < limits.min_gap_steps:
        return (
            f"rollback: only {step - resumed_at[-1]} steps since the last rollback resumed at step "
            f"{resumed_at[-1]}; at least {limits.min_gap_steps} (policy.rollback_min_gap_steps)"
        )
    return None


def rollback_summary(rollback: Rollback, step: int) -> str:
    """One line for the verdict: what is given up and skipped."""
    given_up = max(0, step - rollback.tag_step)
    return (
        f"roll back to {rollback.tag}: {given_up} steps given up, "
        f"{rollback.skip_batches} steps of data skipped"
    )
