"""When a trainer counts as hung: the time since its last sign of life against a limit.

A deadlock, a hung collective or a stopped process sends nothing; a slow step or a long
start-up phase still says something now and then. The clock is told of each sign of life
(a launch, a start-up phase, a step) and answers how long the trainer has been quiet and
whether that is past the limit: ``restart.hang_s`` when the run sets it, else
``HANG_STEP_FACTOR`` times the median interval between the recent steps, never under
``HANG_FLOOR_S``. Pure: time is passed in. Torch-free.
"""

from __future__ import annotations

import statistics
from collections import deque

HANG_FLOOR_S = 600.0
"""The derived limit never goes under this (s): a cold op build, a save of many GB or a
slow first step must not read as a hang."""
HANG_STEP_FACTOR = 20.0
"""The derived limit is this many median step intervals (when that is above the floor)."""
BUILD_PHASES = frozenset({"building_op", "waiting_for_build"})
"""Start-up phases in which a compiler works for minutes and the trainer says nothing: the
limit is then never under ``HANG_FLOOR_S``, whatever ``restart.hang_s`` says (a shorter one
would kill every build and count each kill against ``restart.max_restarts``)."""
PACE_WINDOW = 64  # recent step intervals the median is taken over


class HangClock:
    """Quiet time since the last sign of life, and the limit it is judged against."""

    def __init__(self, hang_s: float | None) -> None:
        self.hang_s = hang_s
        """The configured limit (s); None: derived from the pace."""
        self._last_life: float | None = None
        self._last_step_at: float | None = None
        self._intervals: deque[float] = deque(maxlen=PACE_WINDOW)
        self._building = False  # the last sign of life was a build phase (BUILD_PHASES)

    def sign_of_life(self, now: float, phase: str | None = None) -> None:
        """A launch or a start-up phase (``phase``, its name): the quiet time starts again
        (``now``: monotonic s)."""
        self._last_life = now
        self._last_step_at = None  # the next step's interval includes no start-up
        self._building = phase in BUILD_PHASES

    def on_step(self, now: float) -> None:
        """A step report arrived; its interval to the one before feeds the pace."""
        if self._last_step_at is not None:
            self._intervals.append(now - self._last_step_at)
        self._last_step_at = self._last_life = now
        self._building = False

    def stop(self) -> None:
        """No trainer to watch (it exited, it holds, it stops): nothing is quiet."""
        self._last_life = self._last_step_at = None
        self._building = False

    def limit_s(self) -> float:
        """Seconds of quiet that make a hang."""
        if self.hang_s is not None:
            return max(self.hang_s, HANG_FLOOR_S) if self._building else self.hang_s
        if not self._intervals:
            return HANG_FLOOR_S
        return max(HANG_FLOOR_S, HANG_STEP_FACTOR * statistics.median(self._intervals))

    def quiet_s(self, now: float) -> float | None:
        """Seconds since the last sign of life; None when nothing is being watched."""
        return None if self._last_life is None else now - self._last_life

    def hung(self, now: float) -> bool:
        quiet = self.quiet_s(now)
        return quiet is not None and quiet >= self.limit_s()
