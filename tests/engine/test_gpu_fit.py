"""A config that cannot run on this host's GPUs is refused before anything starts: ranks above
the GPUs NVML shows (after CUDA_VISIBLE_DEVICES), bf16 before Ampere; nothing on a CPU host.
A fake NVML stands for the GPUs; ``memtui run`` exits 2 with the line."""

from __future__ import annotations

import pytest

from engine.config.config_file import build_run_config
from engine.doctor.gpu_architecture import architecture_findings, cuda_build_problem
from engine.doctor.gpu_fit import fit_problems, visible_gpus
from engine.hardware_report import GpuReport, HardwareSnapshot, SoftwareReport
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

    volta = [GpuReport(index=0, name="Tesla V100-SXM2-32GB", compute_capability="7.0")]
    (finding,) = fit_findings(build_run_config({"train": {"precision": "bf16"}}), volta)
    assert finding.level == "unhealthy" and "compute capability 7.0" in finding.message
    assert fit_findings(build_run_config({"train": {"precision": "bf16"}}), []) == []  # no GPU read


@pytest.mark.parametrize(
    ("capability", "torch_cuda", "wanted"),
    [
        ((12, 0), "12.6", "older than 12.8, the first to compile for compute capability 12.0"),  # RTX 50
        ((12, 0), "12.8", None),
        ((10, 0), "12.4", "older than 12.8"),  # B200
        ((9, 0), "11.7", "older than 11.8"),  # H100
        ((9, 0), "13.0", None),
        ((7, 0), "13.0", "CUDA 13 starts at 7.5"),  # V100 with a CUDA 13 wheel
        ((7, 5), "13.0", None),  # T4
        ((7, 0), "12.8", None),
        ((12, 0), None, None),  # a CPU build of torch: named by other checks
    ],
)
def test_a_torch_built_for_a_cuda_without_the_gpus_kernels_is_named(
    capability: tuple[int, int], torch_cuda: str | None, wanted: str | None
) -> None:
    problem = cuda_build_problem(capability, torch_cuda)
    assert problem is None if wanted is None else (problem is not None and wanted in problem)


def test_run_start_and_the_plain_doctor_say_it_without_importing_torch() -> None:
    rtx = visible_gpus(gpus(1, (12, 0), "NVIDIA GeForce RTX 5090"), {})
    (problem,) = fit_problems(build_run_config({}), rtx, True, torch_cuda="12.6")
    assert problem.startswith("GPU0 (NVIDIA GeForce RTX 5090): torch is built for CUDA 12.6")
    assert fit_problems(build_run_config({}), rtx, True, torch_cuda="12.8") == []

    blackwell = [GpuReport(index=0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")] * 2
    hardware = HardwareSnapshot(ts=0.0, gpus=blackwell)
    (finding,) = architecture_findings(SoftwareReport(python="3.11", torch_cuda="12.6"), hardware)
    assert finding.level == "unhealthy" and "install a torch built for CUDA 12.8" in finding.message
    assert architecture_findings(SoftwareReport(python="3.11", torch_cuda="12.8"), hardware) == []
