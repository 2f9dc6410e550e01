"""A config that cannot run on this host's GPUs is refused before anything starts: ranks above
the GPUs NVML shows (after CUDA_VISIBLE_DEVICES), bf16 before Ampere; nothing on a CPU host.
A fake NVML stands for the GPUs; ``memtui run`` exits 2 with the line."""

from __future__ import annotations

import pytest

from engine.config.config_file import build_run_config
from engine.doctor.gpu_fit import fit_problems, visible_gpus
from memtui.cli.main import main
from memtui.cli.runs import lifecycle_commands
from tests.fakes.fake_nvml import FakeNvml, healthy_gpu


def gpus(n: int, capability: tuple[int, int] = (9, 0), name: str = "NVIDIA H100 80GB HBM3") -> FakeNvml:
    return FakeNvml([healthy_gpu(name=name, capability=capability) for _ in range(n)])


def test_more_ranks_than_gpus_names_the_key_and_the_count() -> None:
    config = build_run_config({"train": {"ranks": 8, "global_batch": 64}})
    assert fit_problems(config, visible_gpus(gpus(8), {}), True) == []
    (problem,) = fit_problems(config, visible_gpus(gpus(4), {}), True)
    assert (
        problem
        == "train.ranks = 8 but this host shows 4 GPUs: one rank per GPU; set train.ranks to at most 4"
    )


def test_cuda_visible_devices_narrows_what_a_trainer_sees() -> None:
    assert [g.index for g in visible_gpus(gpus(8), {"CUDA_VISIBLE_DEVICES": "3,1"})] == [3, 1]
    assert [g.index for g in visible_gpus(gpus(2), {"CUDA_VISIBLE_DEVICES": "1,5,0"})] == [1]  # stops at 5
    assert visible_gpus(gpus(8), {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert (
        len(visible_gpus(gpus(2), {"CUDA_VISIBLE_DEVICES": "GPU-8a2c,GPU-77f0"})) == 2
    )  # UUIDs: left to CUDA


def test_bf16_before_ampere_is_refused_and_fp16_is_not() -> None:
    t4 = visible_gpus(gpus(1, (7, 5), "Tesla T4"), {})
    (problem,) = fit_problems(build_run_config({"train": {"precision": "bf16"}}), t4, True)
    assert problem == (
        "train.precision = bf16 but GPU0 (Tesla T4) has compute capability 7.5: bf16 needs 8.0 or later "
        "(Ampere); use fp16"
    )
    assert fit_problems(build_run_config({"train": {"precision": "fp16"}}), t4, True) == []
    a100 = visible_gpus(gpus(1, (8, 0), "NVIDIA A100-SXM4-80GB"), {})
    assert fit_problems(build_run_config({"train": {"precision": "bf16"}}), a100, True) == []


def test_a_cpu_host_has_nothing_to_check() -> None:
    config = build_run_config({"train": {"ranks": 2, "global_batch": 16, "precision": "bf16"}})
    assert fit_problems(config, [], False) == []


def test_memtui_run_exits_2_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lifecycle_commands, "_visible_gpus", lambda: (visible_gpus(gpus(2), {}), True))
    started: list[object] = []
    monkeypatch.setattr(lifecycle_commands, "start_run", started.append)
    assert main(["run", "--set", "train.ranks=4", "--set", "train.global_batch=32", "--detach"]) == 2
    assert "train.ranks = 4 but this host shows 2 GPUs" in capsys.readouterr().err
    assert started == []


def test_memtui_doctor_run_finds_a_config_the_gpus_cannot_run() -> None:
    from engine.doctor.gpu_fit import fit_findings
    from engine.hardware_report import GpuReport

    volta = [GpuReport(index=0, name="Tesla V100-SXM2-32GB", compute_capability="7.0")]
    (finding,) = fit_findings(build_run_config({"train": {"precision": "bf16"}}), volta)
    assert finding.level == "unhealthy" and "compute capability 7.0" in finding.message
    assert fit_findings(build_run_config({"train": {"precision": "bf16"}}), []) == []  # no GPU read
