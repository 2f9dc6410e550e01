"""``memtui plan`` through its command line: the JSON document, a model directory, a run's
measured peak against the plan, bad input as one line and exit 2, and no torch import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.cli.main import main
from tests.fakes.run_script import make_sample

LLAMA_7B = {
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}
GPUS = ["--gpus", "8", "--gpu-memory", "80G", "--gpu", "H100"]


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["plan", *argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert isinstance(document, dict)
    return document


def test_model_directory_at_each_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_7B))
    batch = [
        "--set",
        "train.micro_batch=1",
        "--set",
        "train.global_batch=64",
        "--set",
        'train.precision="bf16"',
    ]
    for stage in range(4):
        doc = plan_json(capsys, str(tmp_path), *GPUS, *batch, "--set", f"train.zero_stage={stage}")
        assert doc["model"]["params"] == 6_738_415_616
        assert doc["train"]["zero_stage"] == stage and doc["train"]["grad_accum"] == 8
        assert doc["per_gpu"]["fits"] is (stage > 0)
        assert doc["hardware"]["peak_tflops"] == 989.4 and doc["hardware"]["peak_source"] == "table (h100)"
        assert [(r["zero_stage"], r["offload"]) for r in doc["table"]][:4] == [(s, "none") for s in range(4)]
        assert doc["recommendation"] == {
            "zero_stage": 1,
            "offload": "none",
            "micro_batch": 1,
            "reason": doc["recommendation"]["reason"],
        }
        assert doc["throughput"]["bound"] in ("compute", "interconnect", "host", "host optimizer")


def test_text_names_the_breakdown_and_the_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *GPUS, "--offload", "optimizer", "--set", "train.zero_stage=2"]) == 0
    out = capsys.readouterr().out
    for words in ("optimizer states", "CUDA context", "allocator slack", "recommend", "host memory", "bound"):
        assert words in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--gpu", "Imaginary 9000", "--gpus", "2", "--gpu-memory", "24G"], "--gpu 'Imaginary 9000'"),
        (["--gpus", "0", "--gpu-memory", "80G"], "--gpus"),
        (["--gpus", "2", "--gpu-memory", "lots"], "--gpu-memory"),
        (["--mfu", "40"], "--mfu"),
        (["--set", "train.zero_stage=9"], "train.zero_stage"),
        (["--set", "train.zero_stage=1", "--offload", "optimizer", *GPUS], "offload"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_model_directory_without_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no config.json" in err


def test_a_run_against_its_measured_peak(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = RunDir.create(build_run_config(name="measured", steps=10), home)
    sample = make_sample(3).model_copy(update={"mem_step_peak": 500 << 20, "micro_batch": 8, "grad_accum": 1})
    with Store(run.store) as store:
        store.add_step(sample)
    doc = plan_json(capsys, run.run_id)
    measured = doc["measured"]
    assert measured["measured_peak"] == 500 << 20 and measured["micro_batch"] == 8
    assert measured["ratio"] == pytest.approx(measured["predicted_peak"] / (500 << 20))


def test_a_run_against_its_measured_peak_less_the_chaos_ballast(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """633 MiB measured of which 256 MiB was chaos ballast: the plan is compared with 377
    MiB, and the step with the largest peak net of ballast is the one chosen."""
    run = RunDir.create(build_run_config(name="ballast", steps=10), home)
    geometry = {"micro_batch": 8, "grad_accum": 1}
    with Store(run.store) as store:
        store.add_step(make_sample(3).model_copy(update={**geometry, "mem_step_peak": 380 << 20}))
        store.add_step(
            make_sample(4).model_copy(
                update={**geometry, "mem_step_peak": 633 << 20, "mem_ballast": 256 << 20}
            )
        )
    measured = plan_json(capsys, run.run_id)["measured"]
    assert (measured["step"], measured["measured_peak"], measured["ballast"]) == (3, 380 << 20, 0)
    with Store(run.store) as store:
        store.add_step(
            make_sample(5).model_copy(
                update={**geometry, "mem_step_peak": 700 << 20, "mem_ballast": 256 << 20}
            )
        )
    measured = plan_json(capsys, run.run_id)["measured"]
    assert (measured["step"], measured["measured_peak"], measured["ballast"]) == (5, 444 << 20, 256 << 20)
    assert measured["ratio"] == pytest.approx(measured["predicted_peak"] / (444 << 20))
    assert main(["plan", run.run_id]) == 0
    assert "444 MiB (cpu-rss, 256 MiB of chaos ballast left out)" in capsys.readouterr().out


@pytest.mark.slow
def test_plan_never_imports_torch() -> None:
    code = (
        "import sys; from memtui.cli.main import main; code = main(['plan', '--json']); "
        "assert 'torch' not in sys.modules and 'deepspeed' not in sys.modules, 'torch imported'; "
        "sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"]["source"] == "built-in"


def test_a_user_workload_is_named_as_not_planned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.toml"
    config.write_text('workload = "my_model:build"\n')
    doc = plan_json(capsys, str(config))
    assert any("my_model:build" in note for note in doc["notes"])


SEED_ZERO3 = Path(__file__).resolve().parents[1] / "fixtures" / "zero3_offload_seed.json"


def test_the_seed_zero3_json_plans_its_optimizer_offload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's ZeRO-3 JSON (``offload_optimizer: cpu, pin_memory``) as users write it."""
    (tmp_path / "ds.json").write_text(SEED_ZERO3.read_text())
    config = tmp_path / "run.toml"
    config.write_text('deepspeed_config = "ds.json"\n')
    doc = plan_json(capsys, str(config), *GPUS)
    assert (doc["train"]["zero_stage"], doc["train"]["offload"]) == (3, "optimizer")
    assert "offload from deepspeed_config.zero_optimization.offload_optimizer.device = cpu" in doc["notes"]
    assert doc["per_gpu"]["optimizer"] == 0 and doc["host_memory"] > 0
    assert main(["plan", str(config), *GPUS]) == 0
    assert "ZeRO-3, optimizer offload" in capsys.readouterr().out.splitlines()[2]
    assert plan_json(capsys, str(config), *GPUS, "--offload", "none")["train"]["offload"] == "none"


def test_the_seed_s_batch_keys_divide_over_the_gpus_planned_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train_batch_size`` 512 with 4 accumulation steps on 8 GPUs is 16 a GPU, as DeepSpeed
    would run it (the config alone, one rank, read it as 128: 1,024 samples a step planned)."""
    (tmp_path / "ds.json").write_text(SEED_ZERO3.read_text())
    config = tmp_path / "run.toml"
    config.write_text('deepspeed_config = "ds.json"\n')
    train = plan_json(capsys, str(config), *GPUS)["train"]
    assert (train["micro_batch"], train["grad_accum"], train["global_batch"]) == (16, 4, 512)
    two_nodes = plan_json(capsys, str(config), *GPUS, "--nodes", "2")["train"]
    assert (two_nodes["micro_batch"], two_nodes["grad_accum"]) == (8, 4)


def test_parameter_offload_and_a_bad_device_in_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text(
        "[train]\nzero_stage = 3\n[deepspeed_config.zero_optimization]\n"
        'offload_param = {device = "nvme"}\noffload_optimizer = {device = "nvme"}\n'
    )
    assert plan_json(capsys, str(config))["train"]["offload"] == "all"
    config.write_text('[deepspeed_config.zero_optimization]\noffload_optimizer = {device = "gpu"}\n')
    assert main(["plan", str(config)]) == 2
    assert "deepspeed_config.zero_optimization.offload_optimizer.device" in capsys.readouterr().err


def test_the_config_s_activation_checkpointing_is_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text("[model]\nn_layer = 8\n")
    without = plan_json(capsys, str(config))
    config.write_text("[model]\nn_layer = 8\n[train]\nactivation_checkpointing = true\n")
    with_it = plan_json(capsys, str(config))
    assert with_it["train"]["activation_checkpointing"] is True
    assert with_it["per_gpu"]["activations_per_sample"] < without["per_gpu"]["activations_per_sample"] / 2


def test_a_run_is_planned_for_the_model_its_trainer_built(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The config says the built-in model; the trainer built (and announced) a GPT-2."""
    from engine.memory.model_description import describe
    from engine.memory.transformer_shape import from_hf_config

    gpt2 = {
        "model_type": "gpt2",
        "n_embd": 256,
        "n_head": 4,
        "n_layer": 4,
        "n_positions": 64,
        "vocab_size": 50257,
    }
    built = describe(
        16_123_456, 0, "/models/gpt2/config.json", from_hf_config(gpt2, "/models/gpt2/config.json", 64)
    )
    run = RunDir.create(build_run_config(name="built", steps=10), home)
    with Store(run.store) as store:
        store.append_event("trainer_started", data={"model_description": built.as_wire()})
    doc = plan_json(capsys, run.run_id)
    assert doc["model"]["params"] == 16_123_456 and doc["model"]["source"] == "/models/gpt2/config.json"
    assert (doc["model"]["n_layer"], doc["model"]["vocab"]) == (4, 50257)


def test_gpu_memory_alone_plans_one_gpu_without_nvml(capsys: pytest.CaptureFixture[str]) -> None:
    hw = plan_json(capsys, "--gpu-memory", "24G")["hardware"]  # was an AssertionError
    assert (hw["gpus_per_node"], hw["gpu_memory"], hw["memory_source"]) == (1, 24 * 1024**3, "given")


def test_a_gpu_name_alone_plans_that_gpu_not_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    hw = plan_json(capsys, "--gpu", "H100")["hardware"]  # was host RAM with an H100's peak
    assert (
        hw["device"] == "H100" and hw["gpu_memory"] == 80 * 1024**3 and hw["memory_source"] == "table (H100)"
    )
    assert (hw["interconnect"], hw["interconnect_source"]) == ("nvlink4", "table")
    five = plan_json(capsys, "--gpu", "RTX 5090", "--gpus", "8")["hardware"]
    assert (five["interconnect"], five["bandwidth_gb_s"], five["gpus_per_node"]) == ("pcie5", 50.0, 8)


def test_a_gpu_whose_size_the_table_cannot_say_asks_for_it(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["plan", "--gpu", "A100"]) == 2
    assert "--gpu-memory: the table has no single size for 'A100'" in capsys.readouterr().err


def test_what_nvml_sees_decides_the_link(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from memtui.cli.plan.plan_hardware import resolve_hardware, seen_gpu
    from tests.fakes.fake_nvml import FakeNvml, healthy_gpu

    args = argparse.Namespace(
        gpus=None, gpu_memory=None, gpu=None, nodes=1, interconnect=None, bandwidth=None, peak_tflops=None
    )
    cut = FakeNvml([healthy_gpu(name="NVIDIA H100 80GB HBM3", nvlinks=0, pcie=(4, 16, 5, 16))] * 4)
    hw = resolve_hardware(args, build_run_config(), seen_gpu(cut))
    assert (hw.gpus_per_node, hw.memory_source, hw.link.name, hw.link_source) == (4, "nvml", "pcie4", "nvml")
    linked = FakeNvml([healthy_gpu(name="NVIDIA H100 80GB HBM3")] * 8)  # 18 NVLinks up
    assert resolve_hardware(args, build_run_config(), seen_gpu(linked)).link.gb_per_s == 450.0
