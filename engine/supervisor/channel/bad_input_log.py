"""What misbehaving peers sent, in supervisor.log: named, rate-limited, summed up.

Each connection has a ``BadInputLog``: its first ``FULL_LINES`` bad inputs are logged in
full with the peer's pid and uid (SO_PEERCRED) and the reason; after that only a count, at
most once per ``COUNT_INTERVAL_S``, and a summary when the connection closes. So a client
sending 10,000 bad lines costs a handful of log lines. One ``LogBudget`` per server caps
what all connections together write (a storm of new connections would otherwise get
``FULL_LINES`` each): lines over it are counted, and the count is logged when the budget
has room again. Torch-free.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from engine.supervisor.channel.peer import PeerCredentials

log = logging.getLogger(__name__)

FULL_LINES = 5  # bad inputs per connection logged with their reason
COUNT_INTERVAL_S = 60.0  # at most one "suppressed" count per connection per this many s
BUDGET_LINES_PER_S = 10.0  # log lines about bad input, all connections together, sustained
BUDGET_BURST = 200  # ... and in a burst
REASON_CHARS = 300  # of a reason written to the log


class LogBudget:
    """A token bucket of log lines shared by every connection of one server."""

    def __init__(
        self,
        per_s: float = BUDGET_LINES_PER_S,
        burst: int = BUDGET_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_s = per_s
        self.burst = burst
        self.clock = clock
        self.dropped = 0
        """Lines not written since the budget last had room."""
        self._tokens = float(burst)
        self._stamp = clock()

    def write(self, message: str, *args: object) -> None:
        """``log.warning(message, *args)`` if the budget has room, else count it."""
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.per_s)
        self._stamp = now
        if self._tokens < 1.0:
            self.dropped += 1
            return
        self._tokens -= 1.0
        if self.dropped:
            log.warning(
                "%d lines about bad input were not logged (over %g lines/s)", self.dropped, self.per_s
            )
            self.dropped = 0
        log.warning(message, *args)


class BadInputLog:
    """One connection's bad input: the first few in full, then counts, then a summary."""

    def __init__(
        self,
        creds: PeerCredentials | None,
        budget: LogBudget,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.peer = f"pid {creds.pid} uid {creds.uid}" if creds is not None else "a peer of unknown pid"
        self.role = "before hello"
        """What the peer said it is, once it said hello."""
        self.count = 0
        """Bad inputs on this connection so far."""
        self.latest = ""
        self._budget = budget
        self._clock = clock
        self._unreported = 0  # suppressed since the last count line
        self._next_count_at = 0.0

    def note(self, reason: str) -> None:
        """One bad input (a line, a refused request, a missing hello) and why it was refused."""
        self.count += 1
        self.latest = reason[:REASON_CHARS]
        if self.count <= FULL_LINES:
            self._budget.write("bad input from %s (%s): %s", self.peer, self.role, self.latest)
            return
        self._unreported += 1
        now = self._clock()
        if self.count == FULL_LINES + 1:
            self._next_count_at = now + COUNT_INTERVAL_S
            self._budget.write(
                "more bad input from %s (%s): counted from now on, not shown", self.peer, self.role
            )
            self._unreported = 0
        elif now >= self._next_count_at:
            self._next_count_at = now + COUNT_INTERVAL_S
            self._report_count()

    def close(self) -> None:
        """The connection closed: a summary, if some of its bad input was not shown."""
        if self.count <= FULL_LINES:
            return
        self._budget.write(
            "connection from %s (%s) closed after %d bad inputs, %d not shown; latest: %s",
            self.peer,
            self.role,
            self.count,
            self.count - FULL_LINES,
            self.latest,
        )

    def _report_count(self) -> None:
        self._budget.write(
            "%d more bad lines from %s (%s) suppressed; latest: %s",
            self._unreported,
            self.peer,
            self.role,
            self.latest,
        )
        self._unreported = 0
