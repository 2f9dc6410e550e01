"""The predictive memory model and the budget, without torch."""

from __future__ import annotations

import pytest

from engine.memory.budget import budget_bytes, budget_fraction
from engine.memory.model import MemoryModel, model_state_bytes, transformer_activation_bytes

MIB = 1 << 20


def test_budget_bytes_fraction_or_none() -> None:
    assert budget_bytes(None, 1000) == 1000
    assert budget_bytes(0.25, 1000) == 250
    assert budget_bytes(1.0, 1000) == 1000
    assert budget_bytes(600, 1000) == 600
    assert budget_bytes(5000, 1000) == 1000  # never more than the device
    assert budget_fraction(250, 1000) == 0.25
    with pytest.raises(ValueError):
        budget_bytes(None, 0)


def test_model_states_by_precision_and_stage() -> None:
    p = 1_000_000
    assert model_state_bytes(p, "fp16", 0).total == 20 * p
    assert model_state_bytes(p, "fp16", 2, world_size=4).total == 2 * p + 18 * p // 4
    assert model_state_bytes(p, "fp16", 1, world_size=4).total == 4 * p + 16 * p // 4
    assert (
        model_state_bytes(p, "fp16", 3, world_size=4, largest_layer_params=1000).total == 18 * p // 4 + 4000
    )
    assert model_state_bytes(p, "fp32", 0).total == 16 * p
    assert model_state_bytes(p, "bf16", 0) == model_state_bytes(p, "fp16", 0)


def test_activations_grow_with_shape() -> None:
    small = transformer_activation_bytes(128, 64, 2, 4, 256, "fp16")
    assert transformer_activation_bytes(128, 64, 4, 4, 256, "fp16") > small
    assert transformer_activation_bytes(256, 64, 2, 4, 256, "fp16") > 2 * small * 0.99
    assert transformer_activation_bytes(128, 64, 2, 4, 256, "fp32") > small


def test_predicts_from_the_prior_then_calibrates_to_measured_peaks() -> None:
    model = MemoryModel(model_states=100 * MIB, per_sample=10 * MIB, seq_len=128)
    assert model.predict(4) == 140 * MIB
    model.observe(4, 300 * MIB, resident=250 * MIB)  # the baseline absorbs the rest
    assert model.predict(4) == 300 * MIB and model.predict(8) == 340 * MIB
    model.observe(8, 380 * MIB, resident=250 * MIB)  # measured slope 20 MiB/sample
    assert model.scale == pytest.approx(1.5)  # halfway from 1 to 2 (smoothed)
    assert model.predict(8) == 380 * MIB


def test_drift_moves_the_baseline_with_resident_memory() -> None:
    model = MemoryModel(model_states=0, per_sample=MIB, seq_len=128)
    model.observe(2, 100 * MIB, resident=90 * MIB)
    model.drift(590 * MIB)  # 500 MiB arrived between steps
    assert model.predict(2) == 600 * MIB
    model.drift(90 * MIB)
    assert model.predict(2) == 100 * MIB


def test_ballast_is_pressure_in_the_predicted_peak_never_in_the_slope() -> None:
    """Chaos ballast arriving between two steps at different micro-batches: the controller's
    predicted peak counts it (it is memory the step must fit beside), the activation slope
    learnt from the two measured peaks does not (256 MiB is not 64 MiB per sample)."""
    model = MemoryModel(model_states=0, per_sample=0.0, seq_len=64)
    model.observe(8, 300 * MIB, resident=200 * MIB)  # 8 samples x 10 MiB over 220 MiB
    model.drift(456 * MIB)  # 256 MiB of ballast at the boundary
    model.observe(4, 516 * MIB, resident=456 * MIB)  # 220 + 256 + 4 x 10 MiB
    assert model.slope() == pytest.approx(10 * MIB)
    assert model.predict(8) == 556 * MIB  # ballast included: the controller must fit it


def test_unknown_workload_learns_its_slope() -> None:
    model = MemoryModel(model_states=0, per_sample=0.0, seq_len=64)
    model.observe(2, 200, resident=100)
    model.observe(4, 260, resident=100)
    assert model.slope() == pytest.approx(30) and model.predict(8) == 380


def test_seed_uses_resident_memory_before_any_step() -> None:
    model = MemoryModel(model_states=10, per_sample=1.0, seq_len=8)
    model.seed(1000)
    assert model.predict(0) == 1000
    model.seed(5)  # only once
    assert model.predict(0) == 1000


def test_the_activation_prior_follows_the_mlp_width_its_gate_and_the_kv_heads() -> None:
    from engine.memory.model import layer_elements

    d = 4096
    assert layer_elements(d, 4 * d, False, d) == 17 * d  # the measured 34 bytes at 16 bits
    llama = layer_elements(d, 11008, True, d)  # SwiGLU: four ffn-wide tensors
    assert llama == 17 / 16 * (8 * d + 4 * 11008) and llama > 17 * d
    assert layer_elements(d, 11008, True, d // 8) < llama  # grouped-query: smaller K and V
    default = transformer_activation_bytes(128, 64, 2, 4, 256, "fp16")
    assert transformer_activation_bytes(128, 64, 2, 4, 256, "fp16", ffn=256, kv_dim=64) == default
    assert transformer_activation_bytes(128, 64, 2, 4, 256, "fp16", ffn=512) > default
