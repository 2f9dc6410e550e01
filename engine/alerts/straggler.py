"""Which rank the others wait for: each rank's own step time against the ranks' median.

Rank reports (every ``train.rank_report_every`` steps) carry each rank's own seconds per
step (``RankMemory.step_s``: its work up to the gradient collective). A rank is slow in a
report when that is at least ``straggler_slower`` above the median of the ranks; it is a
straggler after ``STRAGGLER_REPORTS`` slow reports in a row, and stops being one after as
many reports back under the threshold less the hysteresis margin (so a rank hovering at
the threshold raises one alert). Pure: fed reports, answers counts. Torch-free.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from engine.domain import RankMemory

STRAGGLER_REPORTS = 3
"""Consecutive slow rank reports before a rank is named a straggler, and reports back under
the threshold (less the hysteresis) before it is not: one slow report is a hiccup."""


@dataclass(frozen=True)
class RankStanding:
    """One rank in one report, judged against the median of the ranks."""

    rank: int
    step_s: float
    median_s: float
    slow_reports: int
    """Consecutive reports in which this rank was slow (this one included)."""
    back_reports: int
    """Consecutive reports in which it was back under the threshold less the margin."""

    @property
    def slower(self) -> float:
        """Fraction above the median (0.5: half as slow again)."""
        return self.step_s / self.median_s - 1 if self.median_s > 0 else 0.0


class StragglerWatch:
    """Streaks of slow and of normal reports per rank."""

    def __init__(self, slower: float, margin: float) -> None:
        self.slower = slower
        self.margin = margin
        self._slow: dict[int, int] = {}
        self._back: dict[int, int] = {}

    def on_report(self, ranks: list[RankMemory]) -> list[RankStanding]:
        """Every timed rank of one report (empty with fewer than two timed ranks)."""
        timed = [r for r in ranks if r.step_s is not None]
        if len(timed) < 2:
            return []
        median = statistics.median(r.step_s or 0.0 for r in timed)
        out = []
        for r in timed:
            ratio = (r.step_s or 0.0) / median if median > 0 else 1.0
            slow = ratio >= 1 + self.slower
            back = ratio < 1 + self.slower - self.margin
            self._slow[r.rank] = self._slow.get(r.rank, 0) + 1 if slow else 0
            self._back[r.rank] = self._back.get(r.rank, 0) + 1 if back else 0
            out.append(RankStanding(r.rank, r.step_s or 0.0, median, self._slow[r.rank], self._back[r.rank]))
        return out
