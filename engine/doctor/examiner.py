"""EnvironmentDoctor: is this machine fit to train, and if not, why.

It surveys the software (Python, torch and the CUDA it was built for, the driver and the
CUDA it supports, DeepSpeed and its pre-built ops, the accelerator) and the hardware
(``HardwareProbe``: NVML per GPU, psutil for the host, free disk at the run and checkpoint
directories), then ``judge`` turns the readings into a verdict with reasons.

Torch-free at import and by default: torch's and DeepSpeed's versions and build facts are
read from their installed files (``torch/version.py``, ``deepspeed/git_version_info_installed.py``)
without importing them, so the supervisor and the console can run it in a blink.
``check_ops=True`` (``python -m engine doctor --deep``) asks DeepSpeed which ops can be
JIT-built here and torch whether CUDA works, in a child process (``engine.doctor.torch_probe``:
seconds), once: the answer is kept for every later ``examine()``. No GPU, no driver, NVML
raising, no DeepSpeed answer: never an exit, each gap is a reason. ``judge`` (the rules,
``engine.doctor.findings``) turns the readings into findings; ``render_report`` is the text.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.config.run_config import RunConfig
from engine.doctor.deepspeed_ops import OpSurvey, survey_ops
from engine.doctor.findings import judge, severity_order, verdict_of
from engine.doctor.hardware_probe import HardwareProbe
from engine.doctor.interconnect_probe import read_interconnect
from engine.doctor.interconnect_rules import interconnect_findings
from engine.doctor.nvml_probe import NvmlLibrary, default_library, driver_versions
from engine.doctor.package_facts import read_module_constants
from engine.hardware_report import (
    DoctorReport,
    SoftwareReport,
)


class EnvironmentDoctor:
    """``examine()`` -> DoctorReport. Blocking (NVML, disks): use ``asyncio.to_thread`` on a loop."""

    def __init__(
        self,
        nvml: NvmlLibrary | None | str = "default",
        *,
        run_dir: Path | None = None,
        checkpoint_dir: Path | None = None,
        probe: HardwareProbe | None = None,
        check_ops: bool = False,
        required_ops: Sequence[str] = (),
        interconnect: bool = False,
        rdzv_endpoint: str | None = None,
    ) -> None:
        self.nvml: NvmlLibrary | None = default_library() if nvml == "default" else nvml  # type: ignore[assignment]
        disks = {"run": run_dir or Path.cwd()}
        if checkpoint_dir is not None:
            disks["checkpoints"] = checkpoint_dir
        # Standalone (``memtui doctor``) the only process of ours is the doctor itself.
        self.probe = probe or HardwareProbe(self.nvml, disks, lambda: {"doctor": os.getpid()})
        self.check_ops = check_ops
        """Run the survey (a child importing torch and DeepSpeed: its ops, torch's CUDA
        devices) on the first ``examine()``."""
        self.required_ops = list(required_ops)
        """Ops the run's optimizer needs (``engine.doctor.deepspeed_ops.required_ops``)."""
        self.interconnect = interconnect or rdzv_endpoint is not None
        """Also read InfiniBand ports and the NCCL environment (``memtui doctor``; a run on
        one host does not need them), and try ``rdzv_endpoint`` when given."""
        self.rdzv_endpoint = rdzv_endpoint
        self.op_survey: OpSurvey | None = None
        """The op survey, once taken (or handed in by the supervisor, which runs it async);
        kept: the installed ops do not change under a running run."""

    def examine(self) -> DoctorReport:
        software = self.software()
        hardware = self.probe.read()
        if hardware.gpus:
            software.accelerator, software.accelerator_count = "cuda", len(hardware.gpus)
        links = read_interconnect(self.rdzv_endpoint) if self.interconnect else None
        findings = judge(software, hardware)
        if links is not None:
            findings = sorted(findings + interconnect_findings(links), key=severity_order)
        return DoctorReport(
            ts=time.time(),
            verdict=verdict_of(findings),
            findings=findings,
            software=software,
            hardware=hardware,
            interconnect=links,
        )

    def software(self) -> SoftwareReport:
        gone: dict[str, str] = {}
        fields: dict[str, Any] = {"python": platform.python_version()}
        torch_facts = read_module_constants("torch", "version.py")
        if torch_facts is None:
            gone["torch"] = "torch is not installed"
        else:
            fields["torch"] = torch_facts.get("__version__")
            fields["torch_cuda"] = torch_facts.get("cuda")
        ds_facts = read_module_constants("deepspeed", "git_version_info_installed.py")
        if ds_facts is None:
            gone["deepspeed"] = "deepspeed is not installed"
        else:
            fields["deepspeed"] = ds_facts.get("version") or _dist_version("deepspeed")
            fields["deepspeed_accelerator"] = ds_facts.get("accelerator_name")
            fields["deepspeed_ops"] = {
                str(k): bool(v) for k, v in (ds_facts.get("installed_ops") or {}).items()
            }
            fields["deepspeed_ops_required"] = self.required_ops
            fields["cxx_compiler"] = shutil.which(os.environ.get("CXX") or "c++")
            if self.op_survey is None and self.check_ops:
                self.op_survey = survey_ops()
            if self.op_survey is not None:
                fields.update(op_fields(self.op_survey, gone))
        driver, driver_cuda, why = driver_versions(self.nvml)
        fields["driver"], fields["driver_cuda"] = driver, driver_cuda
        gone.update(why)
        return SoftwareReport(**fields, unavailable=gone)


def op_fields(survey: OpSurvey, gone: dict[str, str]) -> dict[str, Any]:
    """SoftwareReport fields from an op survey; no answer is a reason in ``gone``. Pure."""
    if survey.unavailable is not None:
        gone["deepspeed_op_check"] = survey.unavailable
        return {}
    cuda: dict[str, Any] = {}
    if survey.cuda_error is not None:
        gone["torch_cuda_runtime"] = survey.cuda_error
    elif survey.cuda_devices:  # torch's own word that CUDA works
        cuda = {
            "accelerator": "cuda",
            "accelerator_count": survey.cuda_devices,
            "torch_arch_list": survey.cuda_arch_list,
        }
    return cuda | {
        # The survey's "installed" also checks the accelerator the ops were built for.
        "deepspeed_ops": {name: op.installed for name, op in survey.ops.items()},
        "deepspeed_compatible": {name: op.compatible for name, op in survey.ops.items()},
        "deepspeed_op_notes": {name: op.reason for name, op in survey.ops.items() if op.reason},
        "deepspeed_ninja": survey.ninja,
    }


def required_ops_of(run_dir: Path | None) -> list[str]:
    """The ops the run in ``run_dir`` needs (``memtui doctor`` given a run directory); [] when
    there is no readable run.json."""
    if run_dir is None or not (run_dir / "run.json").is_file():
        return []
    from engine.run.directory import RunDir

    try:
        return ops_required_by(RunDir(run_dir).read_config())
    except Exception:  # a damaged run.json: nothing known
        return []


def ops_required_by(config: RunConfig) -> list[str]:
    """The DeepSpeed ops a run cannot do without (its optimizer's). Torch-free: the DeepSpeed
    config is a pure function of the run's."""
    from engine.config.deepspeed_config import build_deepspeed_config, required_ops

    try:
        return required_ops(build_deepspeed_config(config))
    except ValueError:  # a geometry that does not divide: the trainer will say so
        return []


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
