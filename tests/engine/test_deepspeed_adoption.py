"""A DeepSpeed JSON as users write it: its batch, precision, ZeRO and clipping keys are read
into [train] when they agree, refused with both values named when they do not (no torch)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.config.config_file import ConfigError, build_run_config, load_run_config
from engine.config.deepspeed_config import build_deepspeed_config

# The ZeRO-3 configuration of the InfiniBand article the project started from, as printed there.
SEED_ZERO3 = {
    "train_batch_size": 512,
    "gradient_accumulation_steps": 4,
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "overlap_comm": True,
        "contiguous_gradients": True,
    },
    "fp16": {"enabled": True},
}


def test_the_seed_zero3_config_is_accepted_as_written() -> None:
    config = build_run_config({"deepspeed_config": SEED_ZERO3})
    train = config.train
    assert (train.global_batch, train.micro_batch, train.zero_stage, train.precision) == (512, 128, 3, "fp16")
    # what memtui does not own passes through untouched; what it owns lives in [train] only
    assert config.deepspeed_config == {
        "zero_optimization": {
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "overlap_comm": True,
            "contiguous_gradients": True,
        }
    }
    ds = build_deepspeed_config(config)
    assert ds["gradient_accumulation_steps"] == 4 and ds["train_micro_batch_size_per_gpu"] == 128
    assert ds["zero_optimization"]["stage"] == 3 and ds["zero_optimization"]["overlap_comm"] is True
    assert ds["fp16"]["enabled"] is True


def test_world_size_divides_the_batch() -> None:
    config = build_run_config({"train": {"ranks": 2}, "deepspeed_config": SEED_ZERO3})
    assert (config.train.global_batch, config.train.micro_batch) == (512, 64)
    assert build_deepspeed_config(config, world_size=2)["gradient_accumulation_steps"] == 4


@pytest.mark.parametrize(
    ("ds", "expected"),
    [
        ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, (8, 4)),
        ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8}, (32, 8)),
        ({"gradient_accumulation_steps": 4}, (32, 8)),  # the preset's micro-batch 8 kept
        ({"train_batch_size": 16}, (16, 8)),
        ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}, (8, 8)),
    ],
)
def test_any_two_batch_keys_give_the_third(ds: dict, expected: tuple[int, int]) -> None:
    train = build_run_config({"deepspeed_config": ds}).train
    assert (train.global_batch, train.micro_batch) == expected


@pytest.mark.parametrize(
    ("ds", "expected"),
    [
        ({"bf16": {"enabled": True}}, "bf16"),
        ({"fp16": {"enabled": False}}, "fp32"),
        ({"fp16": {"enabled": False}, "bf16": {"enabled": False}}, "fp32"),
        ({"fp16": {"enabled": "auto"}}, "fp16"),  # the preset's
    ],
)
def test_precision_from_the_enabled_flags(ds: dict, expected: str) -> None:
    assert build_run_config({"deepspeed_config": ds}).train.precision == expected


def test_direct_keys_are_adopted() -> None:
    ds = {
        "gradient_clipping": 0.5,
        "fp16": {"enabled": True, "initial_scale_power": 16, "loss_scale_window": 50},
    }
    config = build_run_config({"deepspeed_config": ds})
    assert (config.train.grad_clip, config.train.initial_scale_power) == (0.5, 16)
    assert config.deepspeed_config == {"fp16": {"loss_scale_window": 50}}


def test_agreeing_train_keys_are_fine() -> None:
    raw = {"train": {"global_batch": 512, "zero_stage": 3}, "deepspeed_config": SEED_ZERO3}
    assert build_run_config(raw).train.micro_batch == 128


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        (
            {"train": {"global_batch": 64}, "deepspeed_config": SEED_ZERO3},
            "deepspeed_config.train_batch_size = 512 conflicts with train.global_batch = 64",
        ),
        (
            {"train": {"zero_stage": 2}, "deepspeed_config": SEED_ZERO3},
            "deepspeed_config.zero_optimization.stage = 3 conflicts with train.zero_stage = 2",
        ),
        (
            {"train": {"precision": "bf16"}, "deepspeed_config": SEED_ZERO3},
            "deepspeed_config.fp16.enabled (precision) = fp16 conflicts with train.precision = bf16",
        ),
        (
            {
                "train": {"micro_batch": 4},
                "deepspeed_config": {"gradient_accumulation_steps": 2, "train_batch_size": 32},
            },
            "deepspeed_config.train_micro_batch_size_per_gpu (implied by gradient_accumulation_steps 2) = 16 "
            "conflicts with train.micro_batch = 4",
        ),
        (
            {
                "deepspeed_config": {
                    "train_batch_size": 64,
                    "train_micro_batch_size_per_gpu": 8,
                    "gradient_accumulation_steps": 2,
                }
            },
            "deepspeed_config.train_batch_size = 64 conflicts with train_micro_batch_size_per_gpu 8 x "
            "gradient_accumulation_steps 2 x train.ranks 1 = 16",
        ),
        (
            {"deepspeed_config": {"train_batch_size": 30, "gradient_accumulation_steps": 4}},
            "deepspeed_config.train_batch_size = 30 is not a multiple of "
            "gradient_accumulation_steps x train.ranks (4)",
        ),
        (
            {"deepspeed_config": {"fp16": {"enabled": True}, "bf16": {"enabled": True}}},
            "deepspeed_config.fp16.enabled = true conflicts with bf16.enabled = true",
        ),
        (
            {"deepspeed_config": {"train_batch_size": "64"}},
            "deepspeed_config.train_batch_size: must be a positive integer (got 64)",
        ),
    ],
)
def test_a_conflict_is_one_line_naming_both_values(raw: dict, line: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(line)) as caught:
        build_run_config(raw)
    assert "\n" not in str(caught.value)


def test_a_json_file_beside_the_toml_is_adopted(tmp_path: Path) -> None:
    (tmp_path / "ds_zero3.json").write_text(json.dumps(SEED_ZERO3))
    (tmp_path / "run.toml").write_text('deepspeed_config = "ds_zero3.json"\n')
    config = load_run_config(tmp_path / "run.toml", settings=["steps=3"])
    assert (config.train.global_batch, config.train.zero_stage, config.steps) == (512, 3, 3)
