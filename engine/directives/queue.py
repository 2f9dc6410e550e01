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

from engine.config import RunConfig
from engine.directives.context import judging_context
from engine.directives.directive import Directive, DirectiveRefused, draft, parse_directive
from engine.directives.effect import EffectWatch
from engine.directives.entry import Entry
from engine.directives.policy import LocalPolicyEngine, PolicyContext
from engine.domain import (
    DIRECTIVE_FIELDS,
    DecisionRecord,
    DirectiveEffect,
    DirectiveField,
    DirectiveState,
    DirectiveValue,
    TelemetrySample,
    Verdict,
)
from engine.events import (
    DirectiveApplied,
    DirectiveDecided,
    DirectiveEffectMeasured,
    DirectiveProposed,
    DirectivesCarried,
    DirectivesRateLimited,
    Recorder,
)
from engine.protocol import (
    ApplyDirective,
    Approve,
    Clamp,
    DirectiveView,
    Error,
    Ok,
    Propose,
    Reject,
)

MAX_KEPT = 1000  # decided directives remembered in memory (the store keeps them all)
SUMMARY_EVERY_S = 2.0  # s between directives_rate_limited summaries during a flood

Sender = Callable[[BaseModel], bool]
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
        self.effects = EffectWatch(config.policy.effect_steps)
        self.ended: str | None = None
        """Why the run ended (directives can no longer be applied), once it has."""
        self._limited: dict[str, int] = {}  # source -> rate-limited proposals not yet summarized
        self._summarized_at = -math.inf  # clock() of the last rate-limit summary

    # ------------------------------------------------------------------ context

    def context(self) -> PolicyContext:
        return judging_context(
            self.config, self.latest, self.effective, self.problems, self.clock(), self.blockers
        )

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
        verdict = self.policy.evaluate(directive, self.context())
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
        entry = Entry(directive, verdict, "pending", list(verdict.reasons))
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
        return self._after_recheck(entry, verdict, "approved", "by the operator")

    def clamp(self, directive_id: str, values: dict[str, Any]) -> Entry:
        """Edited values (merged over what the policy allowed), validated and re-checked."""
        entry = self._pending(directive_id)
        try:
            edited = _validated(entry.directive, values)
        except DirectiveRefused as err:
            raise DirectiveError(f"clamp {directive_id}: {err}") from None
        verdict = self.policy.recheck(entry.directive, {**entry.verdict.patch, **edited}, self.context())
        return self._after_recheck(entry, verdict, "clamped", "by the operator")

    def reject(self, directive_id: str, reason: str) -> Entry:
        entry = self._pending(directive_id)
        entry.reasons.append(f"rejected by the operator: {reason}")
        return self._decide(entry, "rejected", f"by the operator: {reason}")

    # ------------------------------------------------------------ telemetry side

    def on_step(self, sample: TelemetrySample) -> None:
        """Newest telemetry: what the policy judges by; expire what is overdue."""
        self.latest = sample
        self.expire()
        for directive_id, effect in self.effects.on_step(sample):
            self._effect_measured(directive_id, effect)
        if self.clock() - self._summarized_at >= SUMMARY_EVERY_S:
            self.flush_rate_limited()

    def expire(self) -> int:
        now, count = self.clock(), 0
        for entry in [e for e in self.entries.values() if e.state == "pending"]:
            if now >= entry.directive.expires_at:
                entry.reasons.append("expired before an operator decided")
                self._decide(entry, "expired", "no decision before its expiry")
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
        """A (new) trainer: the effective values again (a restart from an older checkpoint
        may have lost some; applying is idempotent), then every approved directive not yet
        applied, unless its TTL passed meanwhile (then it expires); an event says which."""
        if self.effective:
            last = next((e for e in reversed(self.entries.values()) if e.state == "applied"), None)
            self.send(
                ApplyDirective(
                    directive_id=last.directive.id if last else "effective",
                    decision_id=last.verdict.decision_id if last else "",
                    values=dict(self.effective),
                )
            )
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
        entry = self.entries.get(str(echo.directive_id))
        applied: dict[DirectiveField, DirectiveValue] = {
            k: v for k, v in echo.applied.items() if k in self.policy.bounds
        }
        refused = dict(echo.refused)
        if entry is None:
            self.effective.update(applied)  # a re-send of the effective values: nothing new
            return
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

    def _after_recheck(self, entry: Entry, verdict: Verdict, state: DirectiveState, how: str) -> Entry:
        entry.verdict = verdict
        if not verdict.admitted:
            entry.reasons.extend(verdict.reasons)
            expired = verdict.reasons[0].startswith("expired")
            return self._decide(entry, "expired" if expired else "rejected", "on the policy's re-check")
        if state == "clamped":
            entry.reasons.append(f"clamped by the operator to {dict(verdict.patch)}")
        return self._decide(entry, state, how)

    def _decide(self, entry: Entry, state: DirectiveState, how: str) -> Entry:
        entry.state = state
        self._keep_verdict(entry)
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

    def _keep_verdict(self, entry: Entry) -> None:
        """The verdict as a DecisionRecord, to the store (batched there)."""
        record = DecisionRecord.of(
            entry.verdict,
            ts=self.clock(),
            source=entry.directive.source,
            state=entry.state,
            reasons=list(entry.reasons),
        )
        self.keep(record)

    def _send_values(self, entry: Entry) -> None:
        """To the trainer if one is connected; otherwise ``trainer_connected`` sends it."""
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


def _validated(directive: Directive, values: dict[str, Any]) -> dict[DirectiveField, DirectiveValue]:
    """An operator's edited values through the same edge checks as any directive."""
    for name in values:
        if name not in DIRECTIVE_FIELDS:
            raise DirectiveRefused(str(name)[:64], "not a directive field")
    base = directive.model_dump(
        exclude={"lr_multiplier", "gradient_clip_norm", "loss_scale_initial_power", "micro_batch_size"}
    )
    checked = parse_directive({**base, **values})
    return {k: v for k, v in checked.values().items() if k in values}


def answer_request(queue: DirectiveQueue | None, message: Approve | Clamp | Reject | Propose) -> Ok | Error:
    """An operator's directive request, answered; never raises (a bad one is an Error)."""
    if queue is None:
        return Error(id=message.id, reason="directives are not available for this run (no readable run.json)")
    try:
        if isinstance(message, Approve):
            entry = queue.approve(message.directive_id)
        elif isinstance(message, Clamp):
            entry = queue.clamp(message.directive_id, {str(k): v for k, v in message.values.items()})
        elif isinstance(message, Reject):
            entry = queue.reject(message.directive_id, message.reason)
        else:
            entry = queue.propose_raw(dict(message.values), message.source, message.rationale)
    except (DirectiveError, DirectiveRefused) as err:
        return Error(id=message.id, reason=str(err))
    view = entry.view()
    return Ok(
        id=message.id,
        result={"directive": view.model_dump(mode="json"), "verdict": entry.verdict.model_dump(mode="json")},
    )
