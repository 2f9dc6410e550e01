"""Which planner a run has, from its ``policy.planner``, and the one interface they share.

The supervisor asks ``build_planner`` once and calls ``on_step`` with each step's telemetry
(after the queue has seen it): the rule planner judges at once, an external one asks in a
task of its own. Every suggestion goes through the queue, so through the policy.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from engine.config.run_config import PolicyConfig
from engine.directives.directive import DirectiveRefused
from engine.directives.planners.external import Adapter, ExternalPlanner, Spawner
from engine.directives.planners.rules import RulePlanner
from engine.directives.queue import DirectiveQueue, Entry
from engine.domain import TelemetrySample
from engine.events import EvalCompleted, Recorder

SOURCE = "rules"


class Planner(Protocol):
    """What the supervisor drives."""

    def on_step(self, sample: TelemetrySample, spawn: Spawner) -> None: ...

    def on_eval(self, result: EvalCompleted) -> None: ...

    async def close(self) -> None: ...


class RulePlanning:
    """The built-in rules (``RulePlanner``, pure) feeding the queue as source ``rules``.

    It follows what became of its suggestions: one rejected (by the policy at once, or by
    an operator later) is told to the rules, which never suggest that value again; while
    one is pending, the same values are not suggested a second time."""

    def __init__(self, queue: DirectiveQueue) -> None:
        self.rules = RulePlanner(queue.config)
        self.queue = queue
        self.open: dict[str, Entry] = {}
        """Its suggestions not yet applied, rejected or expired, by directive id."""

    def on_step(self, sample: TelemetrySample, spawn: Spawner) -> None:
        self._follow_up()
        effective = {str(k): v for k, v in self.queue.effective.items()}
        checkpoints = self.queue.checkpoints() if self.queue.perform_rollback else {}
        for suggestion in self.rules.observe(sample, effective, self.queue.ooms, checkpoints):
            if any(
                e.state == "pending"
                and e.directive.values() == suggestion.values
                and (e.directive.rollback is None) == (suggestion.rollback is None)
                for e in self.open.values()
            ):
                continue  # the operator has not answered the same suggestion yet
            values: dict[str, Any] = {str(k): v for k, v in suggestion.values.items()}
            if suggestion.rollback is not None:
                values["rollback"] = suggestion.rollback.model_dump()
            with contextlib.suppress(DirectiveRefused):  # unrepresentable: nothing to judge
                entry = self.queue.propose_raw(
                    values,
                    SOURCE,
                    suggestion.rationale,
                    evidence=suggestion.evidence,
                )
                self.open[entry.directive.id] = entry
        self._follow_up()

    def on_eval(self, result: EvalCompleted) -> None:
        """An eval: the rules cite its trend in a learning-rate suggestion's evidence."""
        self.rules.observe_eval(result.step, result.loss)

    def _follow_up(self) -> None:
        for directive_id, entry in list(self.open.items()):
            if entry.state == "rejected":
                self.rules.refuse(entry.directive.values())
            if entry.state in ("rejected", "expired", "applied"):
                del self.open[directive_id]

    async def close(self) -> None:
        pass


def build_planner(
    policy: PolicyConfig, queue: DirectiveQueue, record: Recorder, alert: Recorder | None = None
) -> Planner | None:
    """The configured planner: the rules, a command, an OpenAI-compatible endpoint; None: none.

    ``record``: the planners' own events; ``alert``: the alert path, for the alert of an
    external planner that keeps failing (by default ``record``)."""
    adapter: Adapter
    if policy.planner == "rules":
        return RulePlanning(queue)
    if policy.planner == "command" and policy.planner_command:
        from engine.directives.planners.command import CommandPlanner

        adapter = CommandPlanner(policy.planner_command, policy.planner_timeout_s, record)
    elif policy.planner == "openai" and policy.planner_url and policy.planner_model:
        from engine.directives.planners.openai_http import OpenAIPlanner

        adapter = OpenAIPlanner(
            policy.planner_url, policy.planner_model, policy.planner_api_key_env, policy.planner_timeout_s
        )
    else:
        return None
    return ExternalPlanner(adapter, queue, policy.planner_every_steps, alert=alert or record)
