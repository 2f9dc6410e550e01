"""A workload's own scalars over one optimizer step: summed per micro-batch, reported as means.

``train_step`` hands each forward's named values to ``StepMetrics.add``; a 0-dim tensor is
added to a running sum on its device (``detach().float()``: no host sync per micro-batch).
At a report step, ``StepMetrics.means`` turns the sums into means with one host sync, the
trainer's ``MetricScreen`` keeps what may be reported, and ``mean_over_ranks`` averages
that over the ranks.

Several ranks: each rank screens its own means, then one all-gather of a fixed-size vector
per rank: ``MAX_METRICS`` value slots (the kept names in sorted order) and a fingerprint of
those names (CRC-32 of the sorted names, exact in float64). Ranks agree when every
fingerprint equals rank 0's: then each value is the plain mean over the ranks, which is
the mean over every sample of the step because each rank's share of the step is the same
number of micro-batches of the same size (a mean of equal-sized means). When the ranks
kept different names (rank 1's accuracy was NaN this step, a name only one rank reports),
rank 0's own values are reported alone and the operator is warned once. Only rank 0
reports, so only its view of the agreement matters; every rank still takes part in the
gather at the same report steps (the loop's report cadence does not branch on the rank).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Mapping
from numbers import Real

import torch

from engine.events import MetricWarning
from engine.measures.user_metrics import MAX_METRICS, MetricScreen
from engine.trainer.link import Link
from engine.trainer.ranks.rank_group import RankGroup

log = logging.getLogger(__name__)

RANKS_DISAGREE = "the ranks reported different metric names this step: rank 0's values alone"
"""The warning when the ranks kept different names (said once per run)."""


class StepMetrics:
    """Sums of one step's named values over its micro-batches (reset by ``start``)."""

    def __init__(self) -> None:
        self._sums: dict[object, torch.Tensor | float] = {}
        self._counts: dict[object, int] = {}
        self._other: dict[object, object] = {}
        """Values that cannot be averaged (a string, a tensor of several elements): the
        last one seen, for the screen to refuse by name."""

    def start(self) -> None:
        """Forget what an earlier (or thrown-away, e.g. OOM) window of micro-batches added."""
        self._sums.clear()
        self._counts.clear()
        self._other.clear()

    def add(self, named: Mapping[object, object]) -> None:
        """One micro-batch's values; tensors stay on their device."""
        for name, value in named.items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                self._sum(name, value.detach().float().reshape(()))
            elif isinstance(value, Real) and not isinstance(value, bool):
                self._sum(name, float(value))
            else:
                self._other[name] = value

    def _sum(self, name: object, value: torch.Tensor | float) -> None:
        if name in self._other:
            return  # one non-number in the step taints the name: the screen says so
        self._sums[name] = self._sums.get(name, 0.0) + value
        self._counts[name] = self._counts.get(name, 0) + 1

    def means(self) -> dict[object, object]:
        """Each name's mean over the micro-batches that reported it (floats: one host sync
        for all the tensors together); non-numbers as they came."""
        names = [n for n in self._sums if n not in self._other]
        tensors = {n: t for n in names if isinstance(t := self._sums[n], torch.Tensor)}
        totals = {n: self._sums[n] for n in names if n not in tensors}
        if tensors:
            device = next(iter(tensors.values())).device  # a metric kept on the CPU joins the rest
            stacked = torch.stack([t.to(device) for t in tensors.values()])
            totals.update(zip(tensors, stacked.cpu().tolist(), strict=True))
        means: dict[object, object] = {n: float(totals[n]) / self._counts[n] for n in names}
        return {**means, **self._other}


def fingerprint(names: list[str]) -> float:
    """CRC-32 of the sorted names, as a float64 (exact: below 2**32)."""
    return float(zlib.crc32("\n".join(sorted(names)).encode()))


def mean_over_ranks(
    ranks: RankGroup, kept: dict[str, float], warn: Callable[[str], None]
) -> dict[str, float]:
    """A collective (several ranks): the mean of each kept value over the ranks, when every
    rank kept the same names; else rank 0's own values (and ``warn``). One rank: ``kept``."""
    if ranks.world == 1:
        return kept
    names = sorted(kept)[:MAX_METRICS]  # the screen keeps at most MAX_METRICS names
    row = [fingerprint(names), *(kept[n] for n in names)]
    row += [0.0] * (MAX_METRICS + 1 - len(row))
    rows = ranks.gather_floats(row)
    if any(r[0] != row[0] for r in rows):
        warn(RANKS_DISAGREE)
        return kept
    return {name: sum(r[i + 1] for r in rows) / ranks.world for i, name in enumerate(names)}


class WorkloadMetrics:
    """One per trainer: the metric screen (shared by every report of the workload's values,
    so its limits count the run's names) and its warnings as ``metric_warning`` events."""

    def __init__(self, link: Link, ranks: RankGroup) -> None:
        self.screen = MetricScreen(self._warn)
        self._link, self._ranks = link, ranks
        self._step = 0  # the step whose report is being screened, for the warning event
        self._ranks_warned = False

    def of_step(self, sums: StepMetrics, step: int) -> dict[str, float] | None:
        """A collective (several ranks): what step ``step`` (1-based) reports; None if nothing."""
        self._step = step
        kept = self.screen.screen(sums.means())
        return mean_over_ranks(self._ranks, kept, self._warn_ranks) or None

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self._link.event(MetricWarning(step=self._step), message)

    def _warn_ranks(self, message: str) -> None:
        if not self._ranks_warned:
            self._ranks_warned = True
            self._warn(message)
