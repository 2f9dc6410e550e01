"""When to stop asking an external planner that keeps failing, and what to say about it.

A planner that does not answer (no reply by its deadline, a connection or HTTP error, a
command that died) costs an ask each tick, and its refusals say the same thing over and
over. After ``FAILURES_TO_BACK_OFF`` failed asks in a row its asks are skipped for
``BACKOFF_S``, twice as long after each further failed ask (at most ``MAX_BACKOFF_S``);
the first ask after a skip period is the probe. Backing off raises one warning alert
(rule ``planner``); the first answer, of any content, ends the backoff and resolves the
alert. A skipped ask is told once per skip period (a reason for the driver to store as a
refusal), never once per tick. Pure: the time is passed in (monotonic seconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.domain import Severity
from engine.events import PLANNER_RULE, AlertRaised

FAILURES_TO_BACK_OFF = 2  # failed asks in a row before asks are skipped: one may be a blip
BACKOFF_S = 10.0  # first skip period, s; doubles per further failed ask
MAX_BACKOFF_S = 600.0  # longest skip period, s: a planner that comes back is asked within it


@dataclass(frozen=True)
class PlannerAlert:
    """An ``alert`` event to record: its payload, message and severity."""

    payload: AlertRaised
    message: str
    severity: Severity


class AskBackoff:
    """One planner's run of failures, its skip period and its alert."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.failures = 0
        """Asks in a row that got no answer."""
        self.problem = ""
        """Why the last of them failed."""
        self.until = -math.inf
        """Monotonic s: asks before this are skipped."""
        self.skipped = 0
        """Asks skipped since the failures began."""
        self.firing = False
        """The alert fired and has not been resolved."""
        self._told_until = -math.inf  # the skip period whose first skip was told

    def due(self, now: float) -> bool:
        """Whether an ask may go out now."""
        return now >= self.until

    def skip(self, now: float) -> str | None:
        """An ask not made (it was not ``due``): the reason to store for the first skip of
        this skip period, None for the others."""
        self.skipped += 1
        if self._told_until == self.until:
            return None
        self._told_until = self.until
        return (
            f"not asked: {self.source} failed {self.failures} asks in a row (the last: {self.problem}); "
            f"asks are skipped for {self.until - now:.0f} s more ({self.skipped} skipped so far)"
        )

    def failed(self, now: float, problem: str) -> PlannerAlert | None:
        """An ask got no answer: maybe a skip period begins; the alert when it first does."""
        self.failures += 1
        self.problem = problem
        if self.failures < FAILURES_TO_BACK_OFF:
            return None
        period = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (self.failures - FAILURES_TO_BACK_OFF))
        self.until = now + period
        if self.firing:
            return None  # one alert per run of failures; the skip refusals remind
        self.firing = True
        message = (
            f"planner {self.source} is failing: {self.failures} asks in a row got no answer "
            f"(the last: {problem}); its asks are skipped for {period:g} s, twice as long after "
            "each further failure, until it answers"
        )
        payload = AlertRaised(
            rule=PLANNER_RULE,
            state="firing",
            source=self.source,
            failures=self.failures,
            backoff_s=period,
            reason=problem,
        )
        return PlannerAlert(payload, message, "warning")

    def answered(self) -> PlannerAlert | None:
        """The planner answered: the backoff ends; the "resolved" alert if one fired."""
        failures, skipped, firing = self.failures, self.skipped, self.firing
        self.failures = self.skipped = 0
        self.problem = ""
        self.until = self._told_until = -math.inf
        self.firing = False
        if not firing:
            return None
        payload = AlertRaised(
            rule=PLANNER_RULE, state="resolved", source=self.source, failures=failures, skipped=skipped
        )
        message = (
            f"resolved: planner {self.source} answers again "
            f"(after {failures} failed and {skipped} skipped asks)"
        )
        return PlannerAlert(payload, message, "info")
