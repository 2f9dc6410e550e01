"""The torch-free description of the model built (counts, shape, source; its FLOPs and
activation prior; its wire form) and the offload read once from a run's deepspeed_config."""

from __future__ import annotations

import pytest

from engine.config.config_file import build_run_config
from engine.memory.flops import flops_per_token
from engine.memory.model_description import describe, from_wire
from engine.memory.offload_setting import OffloadError, offload_setting, read_offload
from engine.memory.transformer_shape import ShapeError, from_hf_config, from_model_config

GPT2 = {
    "model_type": "gpt2",
    "n_embd": 256,
    "n_head": 4,
    "n_layer": 4,
    "n_positions": 64,
    "vocab_size": 50257,
}


def test_the_module_s_count_wins_over_the_formula() -> None:
    shape = from_hf_config(GPT2, "gpt2/config.json", 64)
    counted = shape.formula_params() + 1000  # e.g. a head the formula does not know
    described = describe(counted, 0, "gpt2/config.json", shape)
    assert described.params == described.shape.params() == counted  # type: ignore[union-attr]
    positions = 64 * 256  # a lookup: no FLOPs
    assert described.flops_per_token() == 6 * (counted - positions) + 12 * 4 * 64 * 256
    assert described.flops_per_token() > flops_per_token(shape)
    assert described.largest_layer_params == 50257 * 256  # the embedding, as ZeRO-3 gathers it


def test_parameters_alone_give_6n_and_no_activation_prior() -> None:
    described = describe(1_000_000, 4096, "workload my_model:build", None)
    assert described.flops_per_token() == 6_000_000
    assert described.activation_bytes("fp16", checkpointing=False) == 0.0
    assert "shape not declared" in described.words


def test_checkpointing_lowers_the_prior() -> None:
    described = describe(100, 10, "built-in", from_model_config(12, 8, 512, 1024))
    assert described.activation_bytes("bf16", True) < described.activation_bytes("bf16", False) / 3


@pytest.mark.parametrize("shape", [None, from_hf_config(GPT2, "gpt2/config.json", 64)])
def test_the_wire_form_reads_back(shape: object) -> None:
    described = describe(16_041_728, 12_865_792, "gpt2/config.json", shape)  # type: ignore[arg-type]
    assert from_wire(described.as_wire()) == described


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        ({"params": "many"}, "params"),
        ({"source": None}, "source"),
        ({"shape": {"n_layer": 4}}, "shape.d_model"),
        ({"shape": [1, 2]}, "shape"),
    ],
)
def test_a_bad_wire_form_names_the_field(broken: dict, field: str) -> None:
    wire = {**describe(10, 5, "x", from_model_config(2, 4, 64, 128)).as_wire(), **broken}
    with pytest.raises(ShapeError, match=field):
        from_wire(wire)


def test_the_seed_zero3_json_offloads_the_optimizer() -> None:
    seed = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
    config = build_run_config({"deepspeed_config": seed})
    setting = offload_setting(config)
    assert config.train.zero_stage == 3  # adopted from the JSON
    assert (setting.offload, setting.optimizer_device, setting.note) == ("optimizer", "cpu", None)
    assert setting.keys == ("deepspeed_config.zero_optimization.offload_optimizer.device = cpu",)


@pytest.mark.parametrize(
    ("zero", "stage", "offload"),
    [
        ({"offload_optimizer": {"device": "nvme"}, "offload_param": {"device": "nvme"}}, 3, "all"),
        ({"offload_param": {"device": "cpu"}}, 3, "all"),
        ({"offload_optimizer": {"device": "none"}}, 3, "none"),
        ({"cpu_offload": True}, 2, "optimizer"),  # DeepSpeed's deprecated spellings
        ({"cpu_offload_param": True, "cpu_offload": True}, 3, "all"),
        ({"cpu_offload": False}, 2, "none"),
        ({"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}, 2, "optimizer"),
        ({"offload_optimizer": {"device": "cpu"}}, 1, "none"),
        ({"overlap_comm": True}, 3, "none"),
    ],
)
def test_offload_by_key_and_stage(zero: dict, stage: int, offload: str) -> None:
    assert read_offload({"zero_optimization": zero}, stage).offload == offload


def test_what_is_not_counted_is_said() -> None:
    at_one = read_offload({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}, 1)
    assert at_one.note is not None and "not counted at ZeRO-1" in at_one.note
    at_two = read_offload({"zero_optimization": {"offload_param": {"device": "cpu"}}}, 2)
    assert at_two.note is not None and "needs ZeRO-3" in at_two.note


@pytest.mark.parametrize(
    ("zero", "key"),
    [
        ({"offload_optimizer": {"device": "gpu"}}, "offload_optimizer.device"),
        ({"offload_param": "cpu"}, "offload_param"),
        ({"cpu_offload": "yes"}, "cpu_offload"),
    ],
)
def test_a_bad_offload_names_its_key(zero: dict, key: str) -> None:
    with pytest.raises(OffloadError, match=f"deepspeed_config.zero_optimization.{key}"):
        read_offload({"zero_optimization": zero}, 3)
