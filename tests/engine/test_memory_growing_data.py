"""Growing sequences in the memory model and the controller, without torch: predictions
by tokens per micro-batch, a slope learnt from longer data, and the shrink that comes before
the step whose data grew (a fake length feed and a fake measured peak)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.memory.controller import ControllerState, Geometry, Reading, decide
from engine.memory.model import MemoryModel, Predictions
from tests.engine.memory_policies import policy_of

MIB = 1 << 20
POLICY = policy_of(global_batch=16, min_micro_batch=1, max_micro_batch=16, steady_steps=3, cooldown_steps=5)


def test_the_model_predicts_by_tokens_per_micro_batch() -> None:
    model = MemoryModel(model_states=100 * MIB, per_sample=128 * MIB, seq_len=128)  # 1 MiB per token
    assert model.per_token == MIB
    assert model.predict(8, seq_len=256) == model.predict(16) == model.predict_tokens(2048) == 2148 * MIB
    assert model.predict(16, seq_len=64) == model.predict(8)  # shorter data: half the activations


def test_longer_data_at_the_same_micro_batch_calibrates_the_slope_per_token() -> None:
    model = MemoryModel(model_states=0, per_sample=128 * MIB, seq_len=128)  # prior: 1 MiB per token
    model.observe(8, 1000 * MIB, resident=900 * MIB, seq_len=64)  # 512 tokens
    model.observe(8, 2024 * MIB, resident=900 * MIB, seq_len=128)  # 1024 tokens: 2 MiB per token measured
    assert model.scale == pytest.approx(1.5)  # halfway from the prior to the measured (smoothed)
    assert model.per_token == pytest.approx(1.5 * MIB)
    assert model.predict(8, seq_len=128) == 2024 * MIB  # the measured step, exactly
    assert model.predict(8, seq_len=256) == 2024 * MIB + 1536 * MIB


def test_an_unknown_workload_learns_its_slope_from_longer_data() -> None:
    model = MemoryModel(model_states=0, per_sample=0.0, seq_len=100)
    model.observe(4, 1000, resident=500, seq_len=50)  # 200 tokens
    model.observe(4, 1400, resident=500, seq_len=100)  # 400 tokens: 2 bytes per token
    assert model.per_token == pytest.approx(2.0) and model.predict(4, seq_len=200) == 2200


def simulate(
    lengths: Callable[[int], int], truth: Callable[[int], int], budget: int, steps: int, model: MemoryModel
) -> tuple[list[tuple[int, str, Geometry]], list[int]]:
    """The trainer's loop on fakes: before each step the coming step's length is read and
    the controller decides on the peak predicted at it; the step's peak (``truth`` of its
    tokens per micro-batch) is then measured and calibrates the model. Returns the changes
    (step, reason, after) and the measured peaks."""
    state, geometry = ControllerState(), POLICY.geometry(16)
    predictions = Predictions(model, POLICY.allowed)
    changes: list[tuple[int, str, Geometry]] = []
    peaks: list[int] = []
    last: int | None = None
    for step in range(steps):
        coming = predictions.seq_len = lengths(step)
        grown = (last, coming) if last is not None and coming > last else None
        expected = model.predict(geometry.micro_batch, coming)
        reading = Reading(step, expected, budget, predictions, model.baseline or 0, grown=grown)
        state, change = decide(state, geometry, reading, POLICY)
        if change is not None:
            changes.append((step, change.reason, change.after))
            geometry = change.after
        peak = truth(geometry.micro_batch * coming)
        peaks.append(peak)
        model.observe(geometry.micro_batch, peak, resident=1000 * MIB, seq_len=coming)
        last = coming
    return changes, peaks


def test_the_controller_shrinks_before_the_step_whose_data_doubled() -> None:
    def lengths(step: int) -> int:  # the fake feed: 128 tokens, 256 from step 10
        return 128 if step < 10 else 256

    def truth(tokens: int) -> int:  # 1000 MiB that no micro-batch changes + 0.25 MiB per token
        return 1000 * MIB + tokens * MIB // 4

    budget = 1000 * MIB + 800 * MIB  # 16 x 128 tokens: 512 MiB of 800 fit; 16 x 256 (1024) would not
    model = MemoryModel(model_states=500 * MIB, per_sample=32 * MIB, seq_len=128)  # the prior is right
    changes, peaks = simulate(lengths, truth, budget, 20, model)

    assert all(peak <= budget for peak in peaks)  # no step ever ran over the budget
    assert [(step, after) for step, _, after in changes] == [(10, Geometry(8, 2))]  # before step 10
    assert changes[0][1].startswith("the data grew from 128 to 256 tokens per sample: expected peak 128%")
    assert all(after.samples(1) == 16 for _, _, after in changes)  # samples per optimizer step kept


def test_data_that_grows_within_the_room_changes_nothing() -> None:
    budget = 1000 * MIB + 2000 * MIB  # room for 16 x 256 tokens with headroom

    def truth(tokens: int) -> int:
        return 1000 * MIB + tokens * MIB // 4

    model = MemoryModel(model_states=500 * MIB, per_sample=32 * MIB, seq_len=128)
    changes, _ = simulate(lambda step: 128 if step < 10 else 256, truth, budget, 20, model)
    assert changes == []
