"""RunConfig at the edge: presets, overrides, and errors that name the key."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from engine.config.config_file import ConfigError, build_run_config, load_run_config
from engine.config.reference import retired_keys
from tests.doc_pages import GUIDE, examples, pages


def test_no_config_is_the_tiny_demo() -> None:
    config = build_run_config()
    assert (config.preset, config.train.precision, config.train.zero_stage) == ("tiny", "fp16", 0)
    assert config.train.global_batch % config.train.micro_batch == 0


def test_preset_then_file_then_command_line() -> None:
    config = build_run_config({"preset": "small", "model": {"n_layer": 3}, "steps": 10}, steps=99)
    assert config.model.n_layer == 3  # the file's key beats the preset
    assert config.model.d_model == 256  # the rest of the small preset stays
    assert config.steps == 99  # the command line beats the file


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ({"train": {"micro_bach": 4}}, "train.micro_bach: unknown key (did you mean micro_batch?)"),
        ({"stepz": 4}, "stepz: unknown key (did you mean steps?)"),
        ({"chekpoint": {"keep": 2}}, "chekpoint: unknown key (did you mean checkpoint?)"),
        ({"train": {"zzzzzz": 1}}, "train.zzzzzz: unknown key"),
        ({"train": {"precision": "fp8"}}, "train.precision"),
        ({"train": {"zero_stage": 4}}, "train.zero_stage"),
        ({"train": {"lr": float("nan")}}, "train.lr"),
        ({"train": {"micro_batch": 3}}, "global_batch (8) must be a multiple of micro_batch x ranks (3 x 1)"),
        ({"train": {"ranks": 3}}, "global_batch (8) must be a multiple of micro_batch x ranks (8 x 3)"),
        ({"train": {"ranks": 0}}, "train.ranks"),
        ({"model": {"d_model": 66, "n_head": 4}}, "d_model (66) must be a multiple of n_head (4)"),
        ({"preset": "huge"}, "preset: unknown preset 'huge'"),
        ({"name": "../escape"}, "name"),
        ({"workload": "not a spec"}, "workload"),
    ],
)
def test_bad_config_is_refused_naming_the_key(raw: dict, names: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(names)):
        build_run_config(raw)


def test_deepspeed_keys_memtui_owns_are_adopted_the_rest_pass() -> None:
    config = build_run_config({"deepspeed_config": {"train_batch_size": 64}})
    assert config.train.global_batch == 64 and config.deepspeed_config == {}
    with pytest.raises(
        ConfigError, match=r"deepspeed_config.zero_optimization.stage = 2 conflicts with train.zero_stage = 1"
    ):
        build_run_config(
            {"train": {"zero_stage": 1}, "deepspeed_config": {"zero_optimization": {"stage": 2}}}
        )
    config = build_run_config(
        {
            "deepspeed_config": {
                "fp16": {"loss_scale_window": 100},
                "zero_optimization": {"overlap_comm": False},
            }
        }
    )
    assert config.deepspeed_config == {
        "fp16": {"loss_scale_window": 100},
        "zero_optimization": {"overlap_comm": False},
    }


def test_toml_file_with_deepspeed_json_and_workload_dir(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text(json.dumps({"steps_per_print": 7}))
    (tmp_path / "run.toml").write_text('steps = 5\nworkload = "mine:build"\ndeepspeed_config = "ds.json"\n')
    config = load_run_config(tmp_path / "run.toml")
    assert config.deepspeed_config == {"steps_per_print": 7}
    assert config.workload_dir == str(tmp_path.resolve())  # the trainer imports from here


@pytest.mark.parametrize(
    ("text", "message"),
    [("steps = [", "not valid TOML"), ('deepspeed_config = "missing.json"', "missing.json")],
)
def test_unreadable_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "run.toml").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_run_config(tmp_path / "run.toml")


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
def test_the_config_examples_of_readme_and_the_guide_are_valid(tmp_path: Path, page: Path) -> None:
    for example in examples(page):
        if example.lang == "toml" and not example.not_run:
            (tmp_path / "example.toml").write_text(example.text)
            load_run_config(tmp_path / "example.toml")


def test_the_configuration_page_has_its_example() -> None:
    toml = [e for e in examples(GUIDE / "configuration.md") if e.lang == "toml"]
    assert toml, "the guide lost its config example"


def test_set_overrides_one_dotted_key_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('steps = 50\n[train]\nranks = 1\nprecision = "fp16"\n')
    config = load_run_config(path, ["train.ranks=2", "train.global_batch=16", "train.precision=bf16"])
    assert (config.train.ranks, config.train.global_batch, config.train.precision) == (2, 16, "bf16")
    assert config.steps == 50  # the rest of the file stays


@pytest.mark.parametrize(
    ("setting", "names"),
    [
        ("train.rankz=2", "train.rankz: unknown key"),
        ("train.ranks=two", "train.ranks"),
        ("=3", "expected KEY=VALUE"),
        ("train..ranks=2", "expected KEY=VALUE"),
    ],
)
def test_a_bad_set_is_refused_naming_the_key(setting: str, names: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(names)):
        load_run_config(None, [setting])


def test_a_bad_key_in_a_file_is_named_with_the_files_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    lines = [
        'name = "x"',
        "model.n_layr = 2",
        "# a comment",
        "[train]",
        "micro_batc = 4",
        "",
        "[chekpoint]",
        "keep = 2",
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as info:
        load_run_config(path, ["stepz=3"])
    assert str(info.value) == (
        f"{path}:2: model.n_layr: unknown key (did you mean n_layer?); "
        f"{path}:5: train.micro_batc: unknown key (did you mean micro_batch?); "
        f"{path}:7: chekpoint: unknown key (did you mean checkpoint?); "
        "stepz: unknown key (did you mean steps?)"  # from --set: no line of the file
    )


RETIRED = retired_keys()


def test_retired_keys_are_found() -> None:
    assert {"storage.retry_initial_s", "alerts.loss_smoothing_steps", "policy.rate_window_s"} <= dict(
        RETIRED
    ).keys()


@pytest.mark.parametrize(("key", "instead"), RETIRED, ids=[k for k, _ in RETIRED])
def test_a_retired_key_loads_ignored_and_names_a_constant_that_exists(key: str, instead: str) -> None:
    section, name = key.split(".")
    config = build_run_config({section: {name: 1}})  # an older run.json or config still names it
    assert name not in type(getattr(config, section)).model_fields  # not a live key as well
    assert name not in getattr(config, section).model_dump()
    for module, constant in re.findall(r"(engine\.[\w.]+)\.([A-Z][A-Z_]+)\b", instead):
        assert hasattr(importlib.import_module(module), constant), f"{key}: {module}.{constant}"
