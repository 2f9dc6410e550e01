"""How fast the supervisor answers directive requests: a token bucket.

A flood of Propose messages must not cost the trainer its CPU. Judging one proposal takes
about 0.1-0.2 ms of the supervisor's time (validation, policy, the stored verdict, the
answer); 10,000 of them back to back kept one core busy for ~1.6 s and, on a 2-core host,
halved the trainer's step rate meanwhile (bench/directive_flood.py: 46.8 -> 24.9 steps/s).
Paced at 500/s in batches the supervisor spends ~0.07-0.09 CPU-s/s on it (20 s for
10,000), and the trainer's CPU time per step does not move. So directive requests
(Propose, Approve, Clamp, Reject) from all consoles together are answered at most
``RATE_PER_S`` a second after a burst of ``BURST``: the supervisor then waits before
reading that console's next line, and the socket's own backpressure slows the sender.
Waits shorter than ``MIN_SLEEP_S`` are carried over to the next request rather than
slept, so a paced flood is served in small batches (one timer wake-up per batch, not per
request). Pings, status, stop and telemetry are not paced. Pure and torch-free.
"""

from __future__ import annotations

import time
from collections.abc import Callable

RATE_PER_S = 500.0  # directive requests answered per second, all consoles together
BURST = 200  # answered at once before the pace applies (an operator never waits)
MIN_SLEEP_S = 0.02  # s: shorter waits are carried over (a batch of RATE_PER_S x this)


class DirectivePacer:
    """A token bucket that hands out delays: ``delay()`` before answering each request."""

    def __init__(
        self,
        rate_per_s: float = RATE_PER_S,
        burst: int = BURST,
        min_sleep_s: float = MIN_SLEEP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.min_sleep_s = min_sleep_s
        self.clock = clock
        self.tokens = float(burst)
        self.updated = clock()

    def delay(self) -> float:
        """Take one request's token; seconds to wait before answering it (0 within the
        burst, or when under ``min_sleep_s``). Tokens may go negative: each caller reserves
        its place in line, so a wait not slept now is added to the next one."""
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        self.tokens -= 1.0
        wait_s = -self.tokens / self.rate_per_s
        return wait_s if wait_s >= self.min_sleep_s else 0.0
