"""The evaluator on a plain torch module standing in for the DeepSpeed engine (no DeepSpeed:
what it calls on the engine is ``eval``, ``train``, ``training``, ``device`` and a forward)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.config.config_file import build_run_config
from engine.config.run_config import EvalConfig
from engine.events import EvalCompleted, EvalSkipped
from engine.trainer.link import NullLink
from engine.trainer.ranks.rank_group import RankGroup
from engine.trainer.telemetry.evaluation import NO_EVAL_BATCH, EvalShare, Evaluator, combined, rank_indices
from engine.trainer.workloads.workload import builtin_workload
from engine.wire.protocol import TrainerEvent


class Scorer(torch.nn.Module):
    """forward(x) -> (mean of x, {"acc": ...}); notes whether it ran in train mode."""

    def __init__(self) -> None:
        super().__init__()
        self.device = torch.device("cpu")
        self.modes: list[bool] = []
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        self.modes.append(self.training)
        loss = (x.float() * self.scale).mean()
        return loss, {"acc": torch.tensor(0.5), "bad": float("nan")}


def heldout(index: int, micro_batch: int) -> tuple[torch.Tensor]:
    """Batch ``index`` holds ``index`` in every place: its loss is the index."""
    return (torch.full((micro_batch, 4), float(index)),)


def evaluator(
    batch: Any = heldout, ranks: Any = None, every: int = 2, batches: int = 4
) -> tuple[Evaluator, NullLink, Scorer, SimpleNamespace]:
    link, engine, telemetry = NullLink(record=True), Scorer(), SimpleNamespace(eval_s=None)
    config = EvalConfig(every_steps=every, batches=batches)
    made = Evaluator(config, 3, engine, batch, link, ranks or RankGroup(), telemetry)  # type: ignore[arg-type]
    return made, link, engine, telemetry


def sent(link: NullLink, model: Any) -> list[Any]:
    events = [m for m in link.sent or [] if isinstance(m, TrainerEvent) and m.type == model.event_type]
    return [model.model_validate(e.data) for e in events]


def test_an_eval_runs_when_due_in_eval_mode_on_the_same_indices_and_rides_on_the_next_sample() -> None:
    made, link, engine, telemetry = evaluator()
    engine.train()
    for step in range(1, 6):
        made.at_boundary(step)
    evals = sent(link, EvalCompleted)
    assert [e.step for e in evals] == [2, 4]  # every 2 steps, never at step 0
    assert all(e.loss == pytest.approx(1.5) and e.batches == 4 for e in evals)  # mean of 0..3
    assert evals[0].metrics == {"acc": 0.5}  # the non-finite one screened out
    assert engine.modes == [False] * 8 and engine.training  # eval mode inside, train mode after
    assert telemetry.eval_s is not None and telemetry.eval_s >= evals[0].seconds


def test_an_out_of_memory_eval_is_skipped_and_training_goes_on() -> None:
    def exhausted(index: int, micro_batch: int) -> tuple[torch.Tensor]:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    made, link, engine, _ = evaluator(batch=exhausted)
    engine.train()
    made.at_boundary(2)
    (skipped,) = sent(link, EvalSkipped)
    assert skipped.step == 2 and "out of memory" in skipped.reason
    assert sent(link, EvalCompleted) == [] and engine.training


def test_a_workload_without_held_out_batches_says_so_once() -> None:
    made, link, _, telemetry = evaluator(batch=None)
    for step in (2, 4, 6):
        made.at_boundary(step)
    assert [s.reason for s in sent(link, EvalSkipped)] == [NO_EVAL_BATCH]
    assert telemetry.eval_s is None


class TwoRanks(RankGroup):
    """Rank 0 of two; rank 1's share is given (what its gather would bring)."""

    def __init__(self, other: EvalShare) -> None:
        super().__init__(rank=0, world=2)
        self.other = other
        self.gathered: list[EvalShare] = []

    def gather(self, value: Any) -> list[Any]:
        self.gathered.append(value)
        return [value, self.other]


def test_two_ranks_split_the_indices_and_the_loss_is_the_mean_over_every_batch() -> None:
    assert list(rank_indices(5, 0, 2)) == [0, 2, 4] and list(rank_indices(5, 1, 2)) == [1, 3]
    rank1 = EvalShare()
    rank1.add(1.0, {"acc": 1.0})  # index 1
    rank1.add(3.0, {})  # index 3: no acc
    made, link, _, _ = evaluator(ranks=TwoRanks(rank1), batches=4)
    made.at_boundary(2)
    (done,) = sent(link, EvalCompleted)
    assert done.batches == 4 and done.loss == pytest.approx((0 + 2 + 1 + 3) / 4)
    assert done.metrics == {"acc": pytest.approx((0.5 + 0.5 + 1.0) / 3)}  # over the batches that had it


def test_combined_keeps_any_rank_s_out_of_memory_so_every_rank_skips_together() -> None:
    fine, failed = EvalShare(), EvalShare(oom="MemoryError: ")
    fine.add(2.0, {})
    total = combined([fine, failed])
    assert total.oom == "MemoryError: " and total.batches == 1
    assert math.isnan(combined([]).loss)


class Wrapped(torch.nn.Module):
    """A workload's model as the engine holds it: called with the batch, on ``device``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.module = model
        self.device = torch.device("cpu")

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.module(*inputs)


@pytest.mark.parametrize("workload", ["built-in", "hf"])
def test_the_built_in_and_hf_workloads_evaluate_with_the_default_config(
    workload: str, tmp_path: Path
) -> None:
    """No [eval] in the config: an eval at ``eval.every_steps`` on ``eval.batches`` held-out batches."""
    raw: dict[str, Any] = {"model": {"seq_len": 64}}
    if workload == "hf":
        pytest.importorskip("transformers")
        from hf_fixture import make_model_dir, sample_texts, write_jsonl

        from engine.trainer.workloads.hf_workload import hf_workload

        make_model_dir(tmp_path / "model", weights=False)
        raw["hf"] = {
            "model_dir": str(tmp_path / "model"),
            "data": str(write_jsonl(tmp_path / "d.jsonl", sample_texts())),
        }
        built = hf_workload(build_run_config(raw), tmp_path / "cache")
    else:
        built = builtin_workload(build_run_config(raw))
    config = build_run_config(raw)
    link, telemetry = NullLink(record=True), SimpleNamespace(eval_s=None)
    made = Evaluator(config.eval, 2, Wrapped(built.model), built.eval_batch, link, RankGroup(), telemetry)  # type: ignore[arg-type]
    made.at_boundary(config.eval.every_steps)
    (done,) = sent(link, EvalCompleted)
    assert done.step == config.eval.every_steps and done.batches == config.eval.batches
    assert math.isfinite(done.loss) and 3.0 < done.loss < 8.0  # about ln(vocabulary) untrained
