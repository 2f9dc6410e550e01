"""The doctor checks the GPU's compute capability against the architectures torch's
kernels are built for (``torch.cuda.get_arch_list()``): a new card on an old wheel is
unhealthy; a card covered by binary compatibility or PTX is not. Scripted NVML; pure."""

from __future__ import annotations

from engine.doctor.deepspeed_ops import OpSurvey
from engine.doctor.examiner import op_fields
from engine.doctor.findings import judge, verdict_of
from engine.doctor.gpu_architecture import runs_on
from engine.doctor.nvml_probe import probe_gpus
from engine.hardware_report import HardwareSnapshot, SoftwareReport
from tests.fakes.fake_nvml import FakeNvml, healthy_gpu

CU124_WHEEL = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def software(arches: list[str]) -> SoftwareReport:
    return SoftwareReport(
        python="3.12", torch="2.6.0+cu124", torch_cuda="12.4", deepspeed="0.16", driver="570",
        driver_cuda="12.8", torch_arch_list=arches,
    )  # fmt: skip


def machine(name: str, capability: tuple[int, int]) -> HardwareSnapshot:
    gpus, _ = probe_gpus(FakeNvml([healthy_gpu(name=name, capability=capability)]))
    return HardwareSnapshot(ts=0.0, gpus=gpus)


def test_an_rtx_50_on_a_wheel_without_sm_120_is_unhealthy() -> None:
    rtx = machine("NVIDIA GeForce RTX 5090", (12, 0))
    assert rtx.gpus[0].compute_capability == "12.0"
    found = judge(software(CU124_WHEEL), rtx)
    assert verdict_of(found) == "unhealthy"
    assert any("no kernels for NVIDIA GeForce RTX 5090 (sm_120)" in f.message for f in found)
    assert verdict_of(judge(software([*CU124_WHEEL, "sm_100", "sm_120"]), rtx)) == "healthy"


def test_binary_and_ptx_compatibility_are_not_failures() -> None:
    assert runs_on((8, 6), ["sm_80"]) == "native"  # sm_80 code runs on 8.x, x >= 0
    assert runs_on((9, 0), ["sm_80", "compute_80"]) == "ptx"
    assert runs_on((9, 0), ["sm_90a"]) == "native" and runs_on((10, 0), ["sm_90a"]) == "none"
    assert runs_on((10, 3), ["sm_100f"]) == "native"
    h100 = machine("NVIDIA H100 80GB HBM3", (9, 0))
    found = judge(software(["sm_80", "compute_80"]), h100)
    assert verdict_of(found) == "healthy" and any("JIT-compiled from PTX" in f.message for f in found)


def test_an_unknown_arch_list_falls_back_on_the_cuda_torch_was_built_for() -> None:
    """Without the survey (plain ``memtui doctor``): torch built for CUDA 12.4 has nothing for
    an RTX 5090 (sm_120 needs 12.8); built for 12.8 it says nothing."""
    rtx = machine("NVIDIA GeForce RTX 5090", (12, 0))
    found = judge(software([]), rtx)
    assert verdict_of(found) == "unhealthy"
    assert any("built for CUDA 12.4, older than 12.8" in f.message for f in found)
    newer = software([]).model_copy(update={"torch": "2.7.0+cu128", "torch_cuda": "12.8"})
    assert verdict_of(judge(newer, rtx)) == "healthy"


def test_the_surveys_arch_list_reaches_the_report() -> None:
    survey = OpSurvey(accelerator="cuda", cuda_devices=1, cuda_arch_list=["sm_90", "sm_120"])
    assert op_fields(survey, {})["torch_arch_list"] == ["sm_90", "sm_120"]
