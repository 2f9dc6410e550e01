"""The trainer's process ended from outside: SIGKILL, or a preempting host's SIGTERM
(performed by the supervisor: ``engine.supervisor.chaos.performers.processes``). Both are
recovered when a newer attempt reports a step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from engine.chaos.kind import ChaosKind, Pending, RunFacts
from engine.domain import TelemetrySample


def _newer_attempt(pending: Pending, sample: TelemetrySample) -> str | None:
    if sample.attempt > pending.attempt:
        return f"attempt {sample.attempt} reported step {sample.step}"
    return None


class Kill(ChaosKind):
    title = "kill the trainer"
    description = (
        "SIGKILL of the trainer: the restart policy decides (a restart resumes from the newest "
        "verified checkpoint, or from step 0 when the run never had one)"
    )
    performer = "supervisor"
    order = 90
    recovered_when = "the restarted trainer reports a step"
    kind: Literal["kill"] = "kill"

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return "SIGKILL the trainer; the restart policy decides what follows"

    @classmethod
    def outcome(cls, values: Mapping[str, Any], run: RunFacts) -> str | None:
        done = "SIGKILL the trainer"
        if run.max_restarts == 0:
            return f"{done}; restarts are off (restart.max_restarts = 0): the run ends as failed"
        if run.verified_steps:
            newest = run.verified_steps[0]
            return f"{done}; the supervisor restarts it from step {newest}, the newest verified checkpoint"
        if run.on_disk:
            return (
                f"{done}; none of its {run.on_disk} checkpoints verifies: the restarted trainer refuses "
                "a silent fresh start and the run ends (memtui resume --fresh starts over at step 0)"
            )
        return f"{done}; the supervisor restarts it from step 0 (no verified checkpoint yet)"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        return _newer_attempt(pending, sample)


class Preempt(ChaosKind):
    title = "preemption"
    description = (
        "SIGTERM to the trainer, as a preempting host sends: it saves within the grace period and "
        "exits; it is restarted only when the run's restart.on_preemption says so"
    )
    performer = "supervisor"
    order = 100
    recovered_when = "the restarted trainer steps (or the run ended after its save)"
    kind: Literal["preempt"] = "preempt"

    @classmethod
    def phrase(cls, values: Mapping[str, Any]) -> str:
        return "send the trainer SIGTERM, as a preempting host does"

    @classmethod
    def outcome(cls, values: Mapping[str, Any], run: RunFacts) -> str | None:
        done = "send the trainer SIGTERM, as a preempting host does: it saves a checkpoint and exits"
        if run.on_preemption:
            return f"{done}, and the supervisor restarts it from that checkpoint (restart.on_preemption)"
        return f"{done}, and this run ends there (restart.on_preemption is false; memtui resume goes on)"

    @classmethod
    def step_shows(cls, pending: Pending, sample: TelemetrySample) -> str | None:
        return _newer_attempt(pending, sample)

    @classmethod
    def settled(cls, pending: Pending, state: str) -> str | None:
        """Not restarted after it: recovered when a final save followed and the run did not fail."""
        if pending.saved_after and state != "failed":
            return f"the run ended {state} after a final save at step {pending.saved_after[-1]}"
        return None
