"""Runs an external planner (a command or an LLM endpoint) on the run's telemetry.

Every ``planner_every_steps`` optimizer steps the supervisor's ``on_step`` hands the newest
telemetry here; one ask runs at a time as its own task (a step that arrives while one is in
flight is skipped: the next tick carries newer telemetry anyway), so a slow planner never
blocks the supervisor's loop. Each reply goes through the queue's normal path: values are
proposed as any planner's (edge checks, policy, approval), based on the step the planner
was asked about; a refused reply (malformed, slow, hostile, an HTTP error) is an empty
directive rejected with that reason first among its verdict's reasons, stored like any
other verdict (the event and the decision row both name it).

A planner that keeps failing to answer is backed off (``ask_backoff``): its asks are
skipped for a doubling period, a warning alert (rule ``planner``) says so through
``alert``, the first skip of each period is stored as a refusal that says why, and its
first answer ends it all (the alert resolves).
Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from engine.directives.directive import MAX_RATIONALE_CHARS, DirectiveRefused
from engine.directives.planners.ask_backoff import AskBackoff, PlannerAlert
from engine.directives.planners.reply import PlannerReply, refused, unanswered
from engine.directives.queue import DirectiveQueue, Entry
from engine.domain import TelemetrySample
from engine.events import EvalCompleted, Recorder

log = logging.getLogger(__name__)

SMOOTHING = 0.1  # weight of the newest loss in the exponential moving average
Spawner = Callable[[Any], "asyncio.Task[Any]"]


class Adapter(Protocol):
    """What an external planner looks like to the driver."""

    source: str

    async def ask(self, summary: dict[str, Any]) -> PlannerReply: ...

    async def close(self) -> None: ...


def _finite(value: float | None) -> float | None:
    """JSON has no NaN/inf: a non-finite figure is sent as null."""
    return value if value is not None and math.isfinite(value) else None


class TelemetrySummary:
    """The figures a planner sees per tick, with a smoothed loss kept across steps."""

    def __init__(self) -> None:
        self.smoothed: float | None = None
        self.last_eval: EvalCompleted | None = None

    def update(self, sample: TelemetrySample) -> None:
        if math.isfinite(sample.loss):
            old = self.smoothed
            self.smoothed = sample.loss if old is None else old + SMOOTHING * (sample.loss - old)

    def of(self, sample: TelemetrySample, effective: dict[str, Any]) -> dict[str, Any]:
        return {
            "step": sample.step,
            "loss": _finite(sample.loss),
            "loss_smoothed": _finite(self.smoothed),
            "lr": _finite(sample.lr),
            "grad_norm": _finite(sample.grad_norm),
            "loss_scale": _finite(sample.loss_scale),
            "overflow": sample.overflow,
            "overflow_count": sample.overflow_count,
            "mem_step_peak": sample.mem_step_peak,  # bytes per rank
            "mem_predicted": sample.mem_predicted,  # bytes per rank
            "mem_budget": sample.mem_budget,  # bytes per rank
            "mem_capacity": sample.mem_capacity,  # bytes per rank
            "micro_batch": sample.micro_batch,
            "grad_accum": sample.grad_accum,
            "world_size": sample.world_size,
            "effective": dict(effective),  # directive values applied so far
            "metrics": dict(sample.metrics or {}),  # the workload's own scalars, screened
            **self._eval_figures(),
        }

    def _eval_figures(self) -> dict[str, Any]:
        """The newest eval: its step, its held-out loss and its own scalars (None before one)."""
        last = self.last_eval
        return {
            "eval_step": None if last is None else last.step,
            "eval_loss": None if last is None else _finite(last.loss),
            "eval_metrics": {} if last is None else dict(last.metrics),
        }


def hand_over(
    queue: DirectiveQueue, source: str, reply: PlannerReply, step: int | None = None
) -> Entry | None:
    """A reply into the queue: proposed, or stored as a rejection with its reason; never raises.

    ``step``: the step of the telemetry the planner was asked about. The proposal is based
    on it, not on a newer step that came while the planner thought, so the policy judges
    its staleness against the telemetry it answers (None: the newest step)."""
    if reply.problem is None and not reply.values:
        return None  # "{}": nothing to suggest this time
    try:
        if reply.problem is None:
            try:
                return queue.propose_raw(
                    reply.values, source, reply.rationale, evidence=reply.evidence, step=step
                )
            except DirectiveRefused as err:
                return _refuse(queue, source, f"refused at the edge: {err}", step)
        return _refuse(queue, source, reply.problem, step)
    except Exception:  # the queue is the supervisor's: a bug here must not reach it
        log.exception("could not hand over a reply from %s", source)
        return None


def _refuse(queue: DirectiveQueue, source: str, reason: str, step: int | None) -> Entry:
    """A rejection that names the reason, in the event and in the stored decision row."""
    refusal = f"planner output refused: {reason}"[:MAX_RATIONALE_CHARS]
    return queue.propose_raw({}, source, refusal=refusal, step=step)


class ExternalPlanner:
    """Asks an adapter every ``every_steps`` steps; at most one ask in flight.

    ``alert`` records the ``planner`` alert (the supervisor's alert path; by default the
    queue's recorder); ``clock`` is monotonic seconds, for the backoff."""

    def __init__(
        self,
        adapter: Adapter,
        queue: DirectiveQueue,
        every_steps: int,
        alert: Recorder | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter = adapter
        self.queue = queue
        self.every_steps = every_steps
        self.alert = alert or queue.record
        self.clock = clock
        self.summary = TelemetrySummary()
        self.backoff = AskBackoff(adapter.source)
        self.in_flight: asyncio.Task[Any] | None = None
        self.asked = 0

    def on_step(self, sample: TelemetrySample, spawn: Spawner) -> None:
        """Called on the loop for each step; starts an ask when one is due (never waits)."""
        self.summary.update(sample)
        if sample.step % self.every_steps != 0:
            return
        if self.in_flight is not None and not self.in_flight.done():
            return  # still asking about older telemetry
        if not self.backoff.due(self.clock()):
            skipped = self.backoff.skip(self.clock())
            if skipped is not None:  # once per skip period, stored like any refusal
                hand_over(self.queue, self.adapter.source, refused(skipped), sample.step)
            return
        summary = self.summary.of(sample, {str(k): v for k, v in self.queue.effective.items()})
        self.in_flight = spawn(self.tick(summary))

    def on_eval(self, result: EvalCompleted) -> None:
        """The newest eval goes with every later summary (``eval_step``, ``eval_loss``)."""
        self.summary.last_eval = result

    async def tick(self, summary: dict[str, Any]) -> Entry | None:
        self.asked += 1
        try:
            reply = await self.adapter.ask(summary)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # adapters should not raise; if one does, it is a failure
            log.exception("planner %s failed", self.adapter.source)
            reply = unanswered(f"planner failed: {type(err).__name__}: {err}")
        if reply.outcome == "failed":
            self._announce(self.backoff.failed(self.clock(), reply.problem or "no answer"))
        elif reply.outcome == "answered":
            self._announce(self.backoff.answered())
        return hand_over(self.queue, self.adapter.source, reply, summary.get("step"))

    def _announce(self, alert: PlannerAlert | None) -> None:
        if alert is None:
            return
        try:
            self.alert(alert.payload, alert.message, severity=alert.severity)
        except Exception:  # e.g. a store that cannot write: the asks go on
            log.exception("could not record the planner alert of %s", self.adapter.source)

    async def close(self) -> None:
        if self.in_flight is not None:
            self.in_flight.cancel()
        await self.adapter.close()
