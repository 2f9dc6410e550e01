"""A workload's own scalars in the trainer, without DeepSpeed: summed over a step's
micro-batches on the device, means at report time, averaged over ranks that agree on the
names, and every drop warned once as a ``metric_warning`` event."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.events import MetricWarning
from engine.measures.user_metrics import MAX_METRICS
from engine.trainer.chaos.performers import numerics
from engine.trainer.link import NullLink
from engine.trainer.ranks.rank_group import RankGroup
from engine.trainer.telemetry.step_metrics import (
    RANKS_DISAGREE,
    StepMetrics,
    WorkloadMetrics,
    fingerprint,
    mean_over_ranks,
)
from engine.wire.protocol import TrainerEvent


def warnings_of(link: NullLink) -> list[TrainerEvent]:
    return [m for m in link.sent or [] if isinstance(m, TrainerEvent) and m.type == MetricWarning.event_type]


def test_a_steps_values_are_means_over_its_micro_batches_and_tensors_stay_tensors() -> None:
    sums = StepMetrics()
    sums.add({"accuracy": torch.tensor(0.5), "count": 3})
    sums.add({"accuracy": torch.tensor(1.0), "count": 5, "label": "high"})
    assert isinstance(sums._sums["accuracy"], torch.Tensor)  # no host sync per micro-batch
    assert sums.means() == {"accuracy": 0.75, "count": 4.0, "label": "high"}


def test_starting_again_forgets_a_thrown_away_window() -> None:
    sums = StepMetrics()
    sums.add({"accuracy": torch.tensor(0.0)})
    sums.start()  # an OOM: the window is redone at a smaller micro-batch
    sums.add({"accuracy": torch.tensor(1.0)})
    assert sums.means() == {"accuracy": 1.0}


def test_a_name_with_one_non_number_in_the_step_is_left_for_the_screen_to_refuse() -> None:
    sums = StepMetrics()
    sums.add({"loss_parts": torch.ones(3), "acc": torch.tensor(float("nan"))})
    means = sums.means()
    assert isinstance(means["loss_parts"], torch.Tensor)
    assert means["acc"] != means["acc"]  # NaN: the screen drops it, with its warning


class GatheredGroup(RankGroup):
    """Two ranks whose other rank's row is scripted (no process group)."""

    def __init__(self, other: list[float]) -> None:
        super().__init__(rank=0, world=2)
        self.other = other

    def gather_floats(self, values: list[float]) -> list[list[float]]:
        assert len(values) == len(self.other) == MAX_METRICS + 1  # every rank: the same size
        return [list(values), list(self.other)]


def row(values: dict[str, float]) -> list[float]:
    names = sorted(values)
    filled = [fingerprint(names), *(values[n] for n in names)]
    return filled + [0.0] * (MAX_METRICS + 1 - len(filled))


def test_ranks_that_kept_the_same_names_report_the_mean_over_the_ranks() -> None:
    said: list[str] = []
    group = GatheredGroup(row({"accuracy": 0.5, "ppl": 30.0}))
    assert mean_over_ranks(group, {"ppl": 10.0, "accuracy": 1.0}, said.append) == {
        "accuracy": 0.75,
        "ppl": 20.0,
    }
    assert said == []


def test_ranks_that_kept_different_names_report_rank_0s_own_and_warn() -> None:
    said: list[str] = []
    group = GatheredGroup(row({"ppl": 30.0}))  # rank 1's accuracy was dropped (NaN there)
    assert mean_over_ranks(group, {"accuracy": 1.0, "ppl": 10.0}, said.append) == {
        "accuracy": 1.0,
        "ppl": 10.0,
    }
    assert said == [RANKS_DISAGREE]


def test_each_drop_is_one_warning_event_for_the_run_and_good_values_go_on() -> None:
    link = NullLink(record=True)
    metrics = WorkloadMetrics(link, RankGroup())
    hostile: dict[object, object] = {
        "accuracy": torch.tensor(0.25),
        "nan": torch.tensor(float("nan")),
        "text": "high",
        "x" * 200: 1.0,
        **{f"m{i:02d}": float(i) for i in range(40)},
    }
    reported = []
    for step in (1, 2, 3):
        sums = StepMetrics()
        sums.add(hostile)
        reported.append(metrics.of_step(sums, step))
    kept = {"accuracy": 0.25, **{f"m{i:02d}": float(i) for i in range(MAX_METRICS - 1)}}
    assert reported == [kept] * 3
    said = warnings_of(link)
    dropped = 3 + 40 - (MAX_METRICS - 1)  # nan, text, the long name; names past the limit
    assert len(said) == dropped and len({w.message for w in said}) == dropped
    assert {w.data["step"] for w in said} == {1} and {w.severity for w in said} == {"warning"}
    assert any("'nan'" in w.message and "not finite" in w.message for w in said)
    assert any("'text'" in w.message and "str" in w.message for w in said)


def test_a_step_without_metrics_reports_none() -> None:
    assert WorkloadMetrics(NullLink(), RankGroup()).of_step(StepMetrics(), 1) is None


class Scored(torch.nn.Module):
    """A forward that returns (loss, {name: value})."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = (self.w * x).sum()
        return loss, {"accuracy": loss.detach() / 4}


class WindowEngine:
    """What ``skipped_step`` uses of DeepSpeed's engine, around ``Scored``."""

    device = torch.device("cpu")
    skipped_steps = global_steps = global_samples = 0

    def __init__(self) -> None:
        self.module = Scored()

    def __call__(self, *inputs: torch.Tensor) -> Any:
        return self.module(*inputs)

    def gradient_accumulation_steps(self) -> int:
        return 2

    def train_micro_batch_size_per_gpu(self) -> int:
        return 1

    def train_batch_size(self) -> int:
        return 2

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        pass

    def fp16_enabled(self) -> bool:
        return False


def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, ...]:
    return (torch.full((2,), float(micro + 1)),)  # micro-batch 0: loss 2, 1: loss 4


def test_train_step_splits_each_forward_and_sums_its_metrics() -> None:
    from engine.trainer.loop import train_step

    sums = StepMetrics()
    sums.add({"stale": 1.0})  # from a window thrown away: forgotten
    loss = train_step(WindowEngine(), batch, 0, sums)
    assert float(loss) == 3.0 and sums.means() == {"accuracy": 0.75}  # (2/4 + 4/4) / 2


def test_injected_nan_loss_in_fp16_poisons_the_loss_and_keeps_the_metrics() -> None:
    engine = WindowEngine()
    with numerics.forward_hook(engine.module, lambda out: out * float("nan")):
        loss, named = engine(torch.ones(2))
    assert loss.isnan() and float(named["accuracy"]) == 0.5


def test_a_step_the_trainer_skips_itself_works_on_a_forward_that_returns_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = WindowEngine()
    monkeypatch.setattr(numerics, "discard_window", lambda _engine: None)
    loss = numerics.skipped_step(engine, batch, 0, float("nan"))
    assert loss.isnan() and engine.skipped_steps == 1
