"""The fake engine's directives: the real supervisor's answers, played on scripted views.

A scripted directive (``propose(view)``) is pending as the view says, with a verdict made
from it. An operator's ``Propose`` goes through the real edge checks (``draft``) and the real
policy (``LocalPolicyEngine.evaluate``): refused values are an ``Error`` naming the field, a
rejected proposal is recorded as ``directive_decided``, an admitted one as
``directive_proposed``. Approve / Clamp / Reject decide a pending directive as the real
``DirectiveQueue`` does: an edited value outside the bounds rejects the directive (the
operator's number is not moved), an unknown or decided id is an ``Error``, and an approved or
clamped one is echoed later as applied (``applied``: the trainer's ``directive_applied``).
Answers carry ``directive`` and ``verdict``; every event is built from its payload model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from engine.config import RunConfig
from engine.directives.directive import DirectiveRefused, draft
from engine.directives.operator_request import reset_values
from engine.directives.policy import LocalPolicyEngine, PolicyContext, clamp_value
from engine.domain import Bounds, Decision, DirectiveField, DirectiveState, DirectiveValue, Verdict
from engine.events import DirectiveApplied, DirectiveDecided, DirectiveProposed, Recorder
from engine.protocol import Approve, Clamp, DirectiveView, Error, Ok, Propose, Reject

DirectiveRequest = Approve | Clamp | Reject | Propose
FAKE_REVISION = "fake00000000"
"""``policy_revision`` of the verdicts the fake makes itself."""


@dataclass
class FakeDirective:
    view: DirectiveView
    verdict: Verdict


class FakeDirectives:
    """Directives of the fake run, from proposal to the "trainer's" echo."""

    def __init__(self, record: Recorder, config: RunConfig) -> None:
        self.record = record
        self.config = config
        self.policy = LocalPolicyEngine(config)
        self.entries: dict[str, FakeDirective] = {}
        self.ended: str | None = None
        """Why the run ended, once it has (a proposal then is rejected with it)."""
        self._decisions = 0

    @property
    def views(self) -> dict[str, DirectiveView]:
        """id -> the newest view of every directive."""
        return {key: entry.view for key, entry in self.entries.items()}

    # ------------------------------------------------------------------ proposals

    def propose(self, view: DirectiveView) -> None:
        """A scripted directive, pending as ``view`` says (a planner's, already judged)."""
        decision: Decision = "allow" if view.allowed == view.requested else "clamp"
        verdict = self._verdict(view.id, decision, list(view.reasons), dict(view.allowed), dict(view.bounds))
        self.entries[view.id] = entry = FakeDirective(view, verdict)
        self._event(DirectiveProposed, entry, f"directive {view.id} from {view.source}: {decision}")

    def answer(self, message: DirectiveRequest, step: int) -> tuple[Ok | Error, str | None]:
        """The answer to an operator's request, and the id of a directive it admitted (for
        the trainer to apply), if any."""
        if isinstance(message, Propose):
            return self._propose_values(message, step), None
        entry = self.entries.get(message.directive_id)
        if entry is None:
            return Error(id=message.id, reason=f"no directive {message.directive_id!r}"), None
        if entry.view.state == "expired":
            why = next((r for r in reversed(entry.view.reasons) if r.startswith("expired")), "expired")
            return Error(
                id=message.id, reason=f"directive {entry.view.id} can no longer be decided: {why}"
            ), None
        if entry.view.state != "pending":
            reason = f"directive {entry.view.id} is {entry.view.state}, not pending"
            return Error(id=message.id, reason=reason), None
        if isinstance(message, Reject):
            self._decide(entry, "rejected", [f"rejected by the operator: {message.reason}"])
            return self._ok(message.id, entry), None
        values = dict(entry.verdict.patch)
        if isinstance(message, Clamp):
            try:  # the same edge checks as any directive's values
                draft({str(k): v for k, v in message.values.items()}, source="operator", step=0, ttl_s=1.0)
            except DirectiveRefused as err:
                return Error(id=message.id, reason=f"clamp {entry.view.id}: {err}"), None
            values.update(message.values)
        admitted = self._recheck(entry, values, "clamped" if isinstance(message, Clamp) else "approved")
        return self._ok(message.id, entry), entry.view.id if admitted else None

    def applied(self, directive_id: str, step: int) -> None:
        """The trainer's echo of an admitted directive, recorded with its view."""
        entry = self.entries.get(directive_id)
        if entry is None or entry.view.state not in ("approved", "clamped"):
            return
        applied = dict(entry.verdict.patch)
        entry.view = entry.view.model_copy(update={"state": "applied", "allowed": applied})
        echo = DirectiveApplied(
            directive_id=directive_id,
            decision_id=entry.verdict.decision_id,
            step=step,
            applied=applied,
            directive=entry.view,
            verdict=entry.verdict,
        )
        self.record(echo, f"directive {directive_id} applied at step {step}: {applied}")

    def end_run(self, reason: str) -> None:
        """The run ended: every directive pending or admitted but unapplied expires."""
        self.ended = reason
        for entry in self.entries.values():
            if entry.view.state in ("pending", "approved", "clamped"):
                self._decide(entry, "expired", [f"expired: the run ended before it was applied ({reason})"])

    # ------------------------------------------------------------------ internals

    def _propose_values(self, message: Propose, step: int) -> Ok | Error:
        try:
            directive = draft(
                reset_values(self.config, message),
                source=message.source,
                step=step,
                rationale=message.rationale,
                ttl_s=self.config.policy.ttl_s,
            )
        except DirectiveRefused as err:
            return Error(id=message.id, reason=str(err))
        context = PolicyContext(now=time.time(), step=step, precision=self.config.train.precision)
        verdict = self.policy.evaluate(directive, context)
        if self.ended is not None:
            why = f"the run has ended ({self.ended})"
            verdict = verdict.model_copy(update={"decision": "reject", "patch": {}, "reasons": [why]})
        view = DirectiveView(
            id=directive.id,
            source=directive.source,
            created_at=directive.created_at,
            expires_at=directive.expires_at,
            step=directive.step,
            requested=directive.values(),
            allowed=dict(verdict.patch),
            bounds=dict(verdict.bounds),
            reasons=([directive.rationale] if directive.rationale else []) + list(verdict.reasons),
            rollback=directive.rollback,
        )
        self.entries[view.id] = entry = FakeDirective(view, verdict)
        if verdict.admitted:
            self._event(
                DirectiveProposed, entry, f"directive {view.id} from {view.source}: {verdict.decision}"
            )
        else:
            self._decide(entry, "rejected", [])
        return self._ok(message.id, entry)

    def _recheck(
        self, entry: FakeDirective, values: dict[DirectiveField, DirectiveValue], state: DirectiveState
    ) -> bool:
        """The policy's re-check of the values an operator admits: outside the bounds rejects."""
        bounds = {**self.policy.bounds, **entry.view.bounds}
        for name, value in values.items():
            if clamp_value(name, value, bounds)[1] is not None:
                low, high = bounds[name]
                why = f"{name} {value:g} is outside the policy bounds [{low:g}, {high:g}]"
                entry.verdict = self._verdict(entry.view.id, "reject", [why], {}, bounds)
                self._decide(entry, "rejected", [why])
                return False
        entry.verdict = self._verdict(entry.view.id, "allow", [], values, bounds)
        more = [f"clamped by the operator to {values}"] if state == "clamped" else []
        self._decide(entry, state, more)
        return True

    def _decide(self, entry: FakeDirective, state: DirectiveState, reasons: list[str]) -> None:
        update = {
            "state": state,
            "allowed": dict(entry.verdict.patch),
            "reasons": entry.view.reasons + reasons,
        }
        entry.view = entry.view.model_copy(update=update)
        self._event(DirectiveDecided, entry, f"directive {entry.view.id} {state}")

    def _event(
        self, kind: type[DirectiveProposed | DirectiveDecided], entry: FakeDirective, message: str
    ) -> None:
        self.record(kind(directive=entry.view, verdict=entry.verdict), message)

    def _verdict(
        self,
        directive_id: str,
        decision: Decision,
        reasons: list[str],
        patch: dict[DirectiveField, DirectiveValue],
        bounds: Bounds,
    ) -> Verdict:
        self._decisions += 1
        return Verdict(
            decision=decision,
            decision_id=f"fake-{self._decisions}",
            policy_revision=FAKE_REVISION,
            directive_id=directive_id,
            reasons=reasons,
            patch=patch,
            bounds=bounds,
        )

    @staticmethod
    def _ok(request_id: str, entry: FakeDirective) -> Ok:
        result = {
            "directive": entry.view.model_dump(mode="json"),
            "verdict": entry.verdict.model_dump(mode="json"),
        }
        return Ok(id=request_id, result=result)
