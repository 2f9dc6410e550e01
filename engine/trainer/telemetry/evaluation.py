"""Evals: a held-out loss at a step boundary, every ``eval.every_steps`` optimizer steps.

Every rank evaluates its share of the held-out indices ``0 .. eval.batches-1`` (rank r
takes r, r + world, ...): no gradients, the module in eval mode and back in train mode
after. The micro-batch is the configured one (``train.micro_batch``), not the memory
controller's current one, so every eval sees the same samples and evals compare. Every
rank then gathers every rank's sums (one collective that no rank skips, an OOM included)
and all compute the same mean, so the ranks agree on the loss and on an OOM: an eval
that ran out of memory anywhere is skipped with a warning and the run goes on.

Rank 0 reports ``eval_completed`` (or ``eval_skipped``); the seconds the eval held
training ride on the next step's sample (``eval_s``), as a save's stall does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.config.run_config import EvalConfig
from engine.events import EvalCompleted, EvalSkipped
from engine.measures.user_metrics import MetricScreen
from engine.trainer.link import Link
from engine.trainer.memory.oom_recovery import is_oom
from engine.trainer.ranks.rank_group import RankGroup
from engine.trainer.telemetry.step_telemetry import StepTelemetry
from engine.trainer.workloads.forward_output import as_number, split_output

log = logging.getLogger(__name__)

EvalBatchFn = Callable[[int, int], tuple[torch.Tensor, ...]]
"""(index, micro_batch) -> a held-out batch (``Workload.eval_batch``)."""
NO_EVAL_BATCH = "the workload has no eval_batch: no eval loss for this run"


@dataclass
class EvalShare:
    """One rank's part of an eval: sums, so that shares add up across ranks."""

    loss_sum: float = 0.0
    batches: int = 0
    metric_sums: dict[str, float] = field(default_factory=dict)
    metric_counts: dict[str, int] = field(default_factory=dict)
    """Batches that reported each metric (a metric's mean is over those alone)."""
    oom: str | None = None
    """The out-of-memory error that ended this rank's share, if one did."""

    def add(self, loss: float, metrics: Mapping[str, float]) -> None:
        self.loss_sum += loss
        self.batches += 1
        for name, value in metrics.items():
            self.metric_sums[name] = self.metric_sums.get(name, 0.0) + value
            self.metric_counts[name] = self.metric_counts.get(name, 0) + 1

    @property
    def loss(self) -> float:
        """Mean loss per batch (NaN with no batch)."""
        return self.loss_sum / self.batches if self.batches else float("nan")

    @property
    def metrics(self) -> dict[str, float]:
        """Each metric's mean over the batches that reported it."""
        return {name: total / self.metric_counts[name] for name, total in self.metric_sums.items()}


def combined(shares: list[EvalShare]) -> EvalShare:
    """Every rank's share as one (sums added; the first OOM kept). Every batch weighs the
    same, so the loss is the mean over all batches, whichever rank ran them."""
    total = EvalShare()
    for share in shares:
        total.loss_sum += share.loss_sum
        total.batches += share.batches
        for name, value in share.metric_sums.items():
            total.metric_sums[name] = total.metric_sums.get(name, 0.0) + value
            total.metric_counts[name] = total.metric_counts.get(name, 0) + share.metric_counts[name]
        total.oom = total.oom or share.oom
    return total


def rank_indices(batches: int, rank: int, world: int) -> range:
    """The held-out indices rank ``rank`` of ``world`` evaluates (every index once over the ranks)."""
    return range(rank, batches, world)


class Evaluator:
    """Runs the evals of one trainer process; ``at_boundary`` after each optimizer step."""

    def __init__(
        self,
        config: EvalConfig,
        micro_batch: int,
        engine: Any,
        eval_batch: EvalBatchFn | None,
        link: Link,
        ranks: RankGroup,
        telemetry: StepTelemetry,
        screen: MetricScreen | None = None,
    ) -> None:
        self.config = config
        self.micro_batch = micro_batch
        """Samples per held-out batch: the configured micro-batch (the same every eval)."""
        self.engine = engine
        self.eval_batch = eval_batch
        self.link = link
        self.ranks = ranks
        self.telemetry = telemetry
        self.screen = screen or MetricScreen(log.warning)
        """The trainer's screen for a workload's scalars (its own if none was shared)."""
        self._said_none = False

    def due(self, step: int) -> bool:
        """An eval after ``step`` optimizer steps (the same answer on every rank)."""
        every = self.config.every_steps
        return every > 0 and step > 0 and step % every == 0

    def at_boundary(self, step: int) -> None:
        """Evaluate when due; ``step``: optimizer steps done."""
        if not self.due(step):
            return
        if self.eval_batch is None:
            self._say_no_eval_batch(step)
            return
        started = time.perf_counter()
        total = combined(self.ranks.gather(self._share()))  # every rank, OOM or not
        seconds = time.perf_counter() - started
        self.telemetry.eval_s = (self.telemetry.eval_s or 0.0) + seconds
        if total.oom is not None:
            reason = f"out of memory during the eval: {total.oom}; training goes on"
            self.link.event(EvalSkipped(step=step, reason=reason), f"eval at step {step} skipped: {reason}")
            return
        result = EvalCompleted(
            step=step, loss=total.loss, batches=total.batches, seconds=seconds, metrics=total.metrics
        )
        self.link.event(result, f"eval at step {step}: loss {total.loss:.4f} over {total.batches} batches")

    def _share(self) -> EvalShare:
        """This rank's batches, without gradients, in eval mode (train mode restored)."""
        assert self.eval_batch is not None
        share = EvalShare()
        engine = self.engine
        # DeepSpeedEngine.train(mode) sets its module's mode, not its own ``training``
        was_training = getattr(engine, "module", engine).training
        engine.eval()  # dropout off: DeepSpeedEngine.eval() reaches the module
        try:
            with torch.no_grad():
                for index in rank_indices(self.config.batches, self.ranks.rank, self.ranks.world):
                    share.add(*self._batch(index))
        except Exception as err:
            if not is_oom(err):
                raise
            share.oom = f"{type(err).__name__}: {str(err)[:200]}"
            _free_cached(engine)
        finally:
            engine.train(was_training)
        return share

    def _batch(self, index: int) -> tuple[float, dict[str, float]]:
        assert self.eval_batch is not None
        batch = self.eval_batch(index, self.micro_batch)
        inputs = [t.to(self.engine.device, non_blocking=True) for t in batch]
        loss, named = split_output(self.engine(*inputs))
        metrics = self.screen.screen({name: as_number(value) for name, value in named.items()})
        return float(loss.detach().float().item()), metrics

    def _say_no_eval_batch(self, step: int) -> None:
        if not self._said_none:
            self._said_none = True
            self.link.event(EvalSkipped(step=step, reason=NO_EVAL_BATCH), NO_EVAL_BATCH, severity="info")


def _free_cached(engine: Any) -> None:
    """Give back what the failed forward left cached (CUDA), so training has its room again."""
    if getattr(engine.device, "type", str(engine.device)) == "cuda":
        torch.cuda.empty_cache()
