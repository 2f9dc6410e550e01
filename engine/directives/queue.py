"""The directives of one run, from proposal to the trainer's echo (DESIGN: Directive lifecycle).

::

    proposed -> evaluated by the policy: allow | clamp | reject
      -> pending (manual)  -> approved | clamped by the operator (re-checked) | rejected | expired
      -> queued (sent to the trainer) -> applied at a step boundary -> echoed and recorded

The supervisor owns one ``DirectiveQueue``; it hands it requests, telemetry and the
trainer's echoes, and gives it three callables: ``record`` (store an event, then fan it
out), ``send`` (to the trainer; False while none is connected, then the queue keeps the
message and sends it when one connects) and ``keep`` (store one verdict, batched: the
store's ``decisions`` table). Every verdict, each of a flood's included, is kept as a
``DecisionRecord``. Events, which every console is sent, carry each decision whose
``data["directive"]`` is a DirectiveView and ``data["verdict"]`` the policy's audit record,
except rate-limited refusals: only the first of a burst per source is an event, and the
rest are counted in a ``directives_rate_limited`` summary at most every
``SUMMARY_EVERY_S``, so a flood cannot flood the consoles. Torch-free.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from engine.config.run_config import RunConfig
from engine.directive_effect import DirectiveEffect
from engine.directives.context import judging_context
from engine.directives.directive import Directive, DirectiveRefused, draft, edited_values
from engine.directives.effect import EffectWatch
from engine.directives.entry import Entry
from engine.directives.policy import LocalPolicyEngine, PolicyContext
from engine.domain import (
    ONE_SHOT_FIELDS,
    DecisionRecord,
    DirectiveField,
    DirectiveState,
    DirectiveValue,
    Event,
    OperatorDecision,
    TelemetrySample,
    Verdict,
)
from engine.events import (
    ChaosInjected,
    ChaosRecovered,
    DirectiveApplied,
    DirectiveDecided,
    DirectiveEffectMeasured,
    DirectiveProposed,
    DirectivesCarried,
    DirectivesRateLimited,
    Recorder,
)
from engine.wire.protocol import IN_EFFECT_ID, ApplyDirective, DirectiveView

MAX_KEPT = 1000  # decided directives remembered in memory (the store keeps them all)
SUMMARY_EVERY_S = 2.0  # s between directives_rate_limited summaries during a flood

Sender = Callable[[BaseModel], bool]
RollbackPerformer = Callable[[Entry, int], None]  # an approved rollback and the newest step
Keeper = Callable[[DecisionRecord], None]  # Store.add_decision


class DirectiveError(ValueError):
    """An operator request that cannot be done (unknown id, not pending, refused values)."""


class DirectiveQueue:
    """Pending and decided directives of one run, and what goes to the trainer."""

    def __init__(
        self,
        config: RunConfig,
        record: Recorder,
        send: Sender | None = None,
        clock: Callable[[], float] = time.time,
        keep: Keeper | None = None,
    ) -> None:
        self.config = config
        self.policy = LocalPolicyEngine(config)
        self.record = record
        self.send: Sender = send or (lambda _message: False)
        self.keep: Keeper = keep or (lambda _decision: None)
        self.clock = clock
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.effective: dict[DirectiveField, DirectiveValue] = {}
        """Values the trainer echoed as applied, newest per field (re-sent to a new trainer)."""
        self.latest: TelemetrySample | None = None
        self.problems: tuple[str, ...] = ()
        """Health problems from elsewhere (the doctor may set these)."""
        self.blockers: tuple[str, ...] = ()
        """Problems under which no directive passes (set with ``problems``)."""
        self.ooms: dict[int, int] = {}
        """Micro-batch -> the optimizer step of its newest OOM (``on_oom``)."""
        self.effects = EffectWatch(config.policy.effect_steps)
        self.ended: str | None = None
        """Why the run ended (directives can no longer be applied), once it has."""
        self.checkpoints: Callable[[], dict[str, int]] = dict
        """The run's checkpoints that verify now, tag -> step (set by the supervisor)."""
        self.perform_rollback: RollbackPerformer | None = None
        """Carries out an approved rollback (the supervisor's restart); None: none can be."""
        self.rolled_back_to: list[int] = []  # tag steps of the rollbacks performed, oldest first
        self._limited: dict[str, int] = {}  # source -> rate-limited proposals not yet summarized
        self._summarized_at = -math.inf  # clock() of the last rate-limit summary

    # ------------------------------------------------------------------ context

    def context(self) -> PolicyContext:
        return judging_context(
            self.config,
            self.latest,
            self.effective,
            self.problems,
            self.clock(),
            self.blockers,
            self.ooms,
            self.checkpoints() if self.perform_rollback else {},  # no performer: every rollback refused
            tuple(self.rolled_back_to),
        )

    def on_oom(self, micro_batch: int, step: int) -> None:
        """The trainer ran out of memory at ``micro_batch`` at optimizer step ``step``: no
        growth to it (or beyond) is allowed for ``memory.retry_after_steps`` steps."""
        self.ooms[micro_batch] = step

    # ---------------------------------------------------------------- proposals

    def propose_raw(
        self,
        values: dict[str, Any],
        source: str,
        rationale: str = "",
        refusal: str | None = None,
        evidence: list[str] | None = None,
        step: int | None = None,
    ) -> Entry:
        """An operator's or an external planner's values, validated at the edge, then judged.
        ``refusal``: why a planner's reply was refused before it gave values (malformed,
        slow, hostile); the event and the stored decision row both lead with it. ``step``:
        the step whose telemetry the values answer (a planner's ask); None: the newest."""
        if step is None:
            step = self.latest.step if self.latest else 0
        directive = draft(
            values,
            source=source,
            step=step,
            rationale=rationale,
            evidence=evidence,
            ttl_s=self.config.policy.ttl_s,
            now=self.clock(),
        )
        return self.propose(directive, refusal)

    def propose(self, directive: Directive, refusal: str | None = None) -> Entry:
        """Judge a directive; pending (manual), queued (auto) or rejected, each recorded.
        ``refusal``: why it is rejected whatever the policy says (the first of the reasons)."""
        if directive.id in self.entries:
            raise DirectiveRefused("id", f"directive {directive.id!r} already exists")
        context = self.context()
        verdict = self.policy.evaluate(directive, context)
        if self.ended is not None:
            refusal = refusal or f"the run has ended ({self.ended})"
        if refusal is not None:
            verdict = verdict.model_copy(
                update={"decision": "reject", "patch": {}, "reasons": [refusal, *verdict.reasons]}
            )
        if verdict.admitted and self._pending_count() >= self.config.policy.max_pending:
            verdict = verdict.model_copy(
                update={
                    "decision": "reject",
                    "patch": {},
                    "reasons": [f"{self.config.policy.max_pending} directives already pending"],
                }
            )
        stale_after = directive.step + self.config.policy.max_staleness_steps
        entry = Entry(directive, verdict, "pending", list(verdict.reasons), stale_after_step=stale_after)
        chaos = self.effects.chaos_in_effect()
        if chaos and directive.source != "operator":  # a planner may be answering the injection
            entry.reasons.append(f"proposed while injected chaos was in effect: {', '.join(chaos)}")
        entry.note_in_effect(context.current)
        self._keep(entry)
        if verdict.rate_limited:
            return self._rate_limited(entry)
        if not verdict.admitted:
            return self._decide(entry, "rejected", "by the policy")
        self._event(
            DirectiveProposed,
            entry,
            f"directive {directive.id} from {directive.source}: {verdict.decision}",
        )
        if self.config.policy.approval == "auto":
            return self._decide(
                entry, "clamped" if verdict.decision == "clamp" else "approved", "by the policy (auto)"
            )
        self._keep_verdict(entry)
        return entry

    # --------------------------------------------------------- operator answers

    def approve(self, directive_id: str) -> Entry:
        entry = self._pending(directive_id)
        verdict = self.policy.recheck(entry.directive, dict(entry.verdict.patch), self.context())
        return self._after_recheck(entry, verdict, "approve")

    def clamp(self, directive_id: str, values: dict[str, Any]) -> Entry:
        """Edited values of the directive's own fields (merged over what the policy allowed),
        validated and re-checked."""
        entry = self._pending(directive_id)
        try:
            edited = edited_values(entry.directive, values)
        except DirectiveRefused as err:
            raise DirectiveError(f"clamp {directive_id}: {err}") from None
        verdict = self.policy.recheck(entry.directive, {**entry.verdict.patch, **edited}, self.context())
        return self._after_recheck(entry, verdict, "clamp")

    def reject(self, directive_id: str, reason: str) -> Entry:
        entry = self._pending(directive_id)
        entry.reasons.append(f"rejected by the operator: {reason}")
        return self._decide(entry, "rejected", f"by the operator: {reason}", operator="reject")

    # ------------------------------------------------------------ telemetry side

    def on_event(self, event: Event) -> None:
        """The run's events: chaos injected and its verdicts mark the steps it touched, which
        a directive's measured effect then names (``EffectWatch``)."""
        injected = ChaosInjected.of(event)
        if injected is not None:
            step = injected.step if injected.step is not None else (self.latest.step if self.latest else 0)
            self.effects.chaos_injected(injected.chaos_id, injected.kind, step)
            return
        settled = ChaosRecovered.of(event)
        if settled is not None:
            step = settled.step if settled.step is not None else (self.latest.step if self.latest else 0)
            self.effects.chaos_settled(settled.chaos_id, step)

    def on_step(self, sample: TelemetrySample) -> None:
        """Newest telemetry: what the policy judges by; expire what is overdue."""
        self.latest = sample
        self.expire()
        for directive_id, effect in self.effects.on_step(sample):
            self._effect_measured(directive_id, effect)
        if self.clock() - self._summarized_at >= SUMMARY_EVERY_S:
            self.flush_rate_limited()

    def expire(self) -> int:
        """Expire the pending directives whose TTL has passed, or that the newest step has made
        stale (an approval would be refused as stale: the panel stops offering it)."""
        now, step, count = self.clock(), self.latest.step if self.latest else None, 0
        for entry in [e for e in self.entries.values() if e.state == "pending"]:
            stale = None if step is None else self.policy.stale_reason(entry.directive, step)
            if now >= entry.directive.expires_at:
                entry.reasons.append("expired before an operator decided")
                self._decide(entry, "expired", "no decision before its expiry")
            elif stale is not None:
                self._expire(entry, f"{stale}, before an operator decided")
            else:
                continue
            count += 1
        return count

    def flush_rate_limited(self) -> None:
        """Record the count of rate-limited proposals per source since the last flush (each
        of them is already a stored decision; this is the consoles' summary)."""
        self._summarized_at = self.clock()
        for source, count in self._limited.items():
            self.record(
                DirectivesRateLimited(source=source, count=count, policy_revision=self.policy.revision),
                f"{count} directive(s) from {source!r} refused: over the rate limit",
            )
        self._limited.clear()

    # --------------------------------------------------------------- trainer side

    def trainer_connected(self) -> None:
        """A (new) trainer: the values in effect again (a restart from an older checkpoint
        may have lost some; applying is idempotent) as a re-send, which is no directive's
        apply, without the one-shot ones (the checkpoint restored the scaler and the geometry
        they set, and where those went since);
        then every approved directive not yet applied, unless its TTL passed meanwhile
        (then it expires); an event says which."""
        again = {k: v for k, v in self.effective.items() if k not in ONE_SHOT_FIELDS}
        if again:
            self.send(ApplyDirective(directive_id=IN_EFFECT_ID, values=again, resend=True))
        kept, expired, now = [], [], self.clock()
        for entry in [e for e in self.entries.values() if e.state in ("approved", "clamped")]:
            if now >= entry.directive.expires_at:
                self._expire(entry, "its TTL passed before a trainer could apply it")
                expired.append(entry.directive.id)
            else:
                self._send_values(entry)
                kept.append(entry.directive.id)
        if kept or expired:
            sent, lapsed = ", ".join(kept) or "none", ", ".join(expired) or "none"
            self.record(
                DirectivesCarried(kept=kept, expired=expired),
                f"trainer connected: approved directives sent again: {sent}; expired by TTL: {lapsed}",
            )

    def end_run(self, reason: str) -> int:
        """The run stopped, finished or failed: every directive still pending or approved
        but unapplied expires, with ``reason``; later answers are refused."""
        self.ended = reason
        waiting = [e for e in self.entries.values() if e.state in ("pending", "approved", "clamped")]
        for entry in waiting:
            self._expire(entry, f"the run ended before it was applied ({reason})")
        return len(waiting)

    def on_applied(self, echo: DirectiveApplied) -> None:
        """The trainer's ``directive_applied`` echo: what it applied and what it refused."""
        entry = None if echo.resend else self.entries.get(str(echo.directive_id))
        applied: dict[DirectiveField, DirectiveValue] = {
            k: v for k, v in echo.applied.items() if k in self.policy.bounds
        }
        refused = dict(echo.refused)
        if entry is None or entry.state == "applied":
            self.effective.update(applied)  # a re-send of the values in effect: nothing new
            return
        own = entry.verdict.patch  # a directive's apply is its own fields, whatever is echoed
        applied = {k: v for k, v in applied.items() if k in own}
        entry.note_in_effect(self.context().current)  # just before: the "from" of its change
        entry.applied = applied
        for name, why in refused.items():
            entry.reasons.append(f"trainer refused {name}: {why}")
        if applied:
            self.effective.update(applied)
            entry.state = "applied"
            if echo.step is not None:
                self.effects.applied(entry.directive.id, echo.step)
        else:
            entry.state = "rejected"
        step = echo.step
        recorded = DirectiveApplied(
            directive_id=entry.directive.id,
            decision_id=entry.verdict.decision_id,
            step=step,
            applied=dict(applied),
            refused=refused,
            directive=entry.view(),
            verdict=entry.verdict,
        )
        self.record(
            recorded,
            (
                f"directive {entry.directive.id} applied at step {step}: {applied}"
                if applied
                else f"directive {entry.directive.id} refused by the trainer"
            )[:4096],
            severity="info" if applied else "warning",
        )

    # ------------------------------------------------------------------ listing

    def views(self) -> list[DirectiveView]:
        return [e.view() for e in self.entries.values()]

    # ---------------------------------------------------------------- internals

    def _pending(self, directive_id: str) -> Entry:
        entry = self.entries.get(directive_id)
        if entry is None:
            raise DirectiveError(f"no directive {directive_id!r}")
        if entry.state == "expired":
            why = next((r for r in reversed(entry.reasons) if r.startswith("expired")), "expired")
            raise DirectiveError(f"directive {directive_id} can no longer be decided: {why}")
        if entry.state != "pending":
            raise DirectiveError(f"directive {directive_id} is {entry.state}, not pending")
        if self.ended is not None:
            raise DirectiveError(f"directive {directive_id}: the run has ended ({self.ended})")
        return entry

    def _pending_count(self) -> int:
        return sum(1 for e in self.entries.values() if e.state == "pending")

    def _after_recheck(self, entry: Entry, verdict: Verdict, operator: OperatorDecision) -> Entry:
        """The operator's approval or clamp, as the policy judged it again."""
        entry.verdict = verdict
        entry.note_in_effect(self.context().current)
        if not verdict.admitted:
            entry.reasons.extend(verdict.reasons)
            expired = verdict.reasons[0].startswith("expired")
            state: DirectiveState = "expired" if expired else "rejected"
            return self._decide(entry, state, "on the policy's re-check", operator=operator)
        entry.reasons.extend(verdict.reasons)
        if operator == "clamp":
            entry.reasons.append(f"clamped by the operator to {dict(verdict.patch)}")
            return self._decide(entry, "clamped", "by the operator", operator=operator)
        return self._decide(entry, "approved", "by the operator", operator=operator)

    def _decide(
        self, entry: Entry, state: DirectiveState, how: str, operator: OperatorDecision | None = None
    ) -> Entry:
        entry.state = state
        self._keep_verdict(entry, operator)
        self._event(DirectiveDecided, entry, f"directive {entry.directive.id} {state} {how}")
        if state in ("approved", "clamped"):
            self._send_values(entry)
        return entry

    def _expire(self, entry: Entry, why: str) -> None:
        entry.reasons.append(f"expired: {why}")
        self._decide(entry, "expired", why)

    def _effect_measured(self, directive_id: str, effect: DirectiveEffect) -> None:
        entry = self.entries.get(directive_id)
        if entry is None:
            return  # forgotten meanwhile (MAX_KEPT): the store has its applied event
        entry.effect = effect
        self.record(
            DirectiveEffectMeasured(directive=entry.view(), verdict=entry.verdict, effect=effect),
            f"directive {directive_id} effect {effect.describe()}"[:4096],
        )

    def _rate_limited(self, entry: Entry) -> Entry:
        entry.state = "rejected"
        self._keep_verdict(entry)
        source = entry.directive.source
        if source not in self._limited:  # the first of a burst is recorded in full
            self._event(DirectiveDecided, entry, f"directive {entry.directive.id} rejected: rate limit")
        self._limited[source] = self._limited.get(source, 0) + 1
        return entry

    def _keep_verdict(self, entry: Entry, operator: OperatorDecision | None = None) -> None:
        """The verdict as a DecisionRecord, to the store (batched there); ``operator``: the
        operator's decision it records, if any."""
        record = DecisionRecord.of(
            entry.verdict,
            ts=self.clock(),
            source=entry.directive.source,
            state=entry.state,
            reasons=list(entry.reasons),
        ).model_copy(update={"operator": operator})
        self.keep(record)

    def _send_values(self, entry: Entry) -> None:
        """To the trainer if one is connected; otherwise ``trainer_connected`` sends it. A
        rollback goes to the supervisor's restart instead, and counts as applied there."""
        rollback = entry.directive.rollback
        if rollback is not None and self.perform_rollback is not None:
            entry.state = "applied"
            self.rolled_back_to.append(rollback.tag_step)
            self.perform_rollback(entry, self.latest.step if self.latest else 0)
            return
        self.send(
            ApplyDirective(
                directive_id=entry.directive.id,
                decision_id=entry.verdict.decision_id,
                values=dict(entry.verdict.patch),
            )
        )

    def _event(self, kind: type[DirectiveProposed | DirectiveDecided], entry: Entry, message: str) -> None:
        self.record(kind(directive=entry.view(), verdict=entry.verdict), message[:4096])

    def _keep(self, entry: Entry) -> None:
        self.entries[entry.directive.id] = entry
        while len(self.entries) > MAX_KEPT:
            oldest = next((k for k, e in self.entries.items() if e.state != "pending"), None)
            if oldest is None:
                break
            del self.entries[oldest]
