"""EnvironmentDoctor: is this machine fit to train, and if not, why.

It surveys the software (Python, torch and the CUDA it was built for, the driver and the
CUDA it supports, DeepSpeed and its pre-built ops, the accelerator) and the hardware
(``HardwareProbe``: NVML per GPU, psutil for the host, free disk at the run and checkpoint
directories), then ``judge`` turns the readings into a verdict with reasons.

Torch-free at import and by default: torch's and DeepSpeed's versions and build facts are
read from their installed files (``torch/version.py``, ``deepspeed/git_version_info_installed.py``)
without importing them, so the supervisor and the console can run it in a blink.
``import_torch=True`` (``python -m engine doctor --deep``) also asks torch itself whether
CUDA works. ``check_ops=True`` (also ``--deep``) asks DeepSpeed which ops can be JIT-built
here, in a child process (``engine.doctor.deepspeed_ops``: seconds), once: the answer is kept for
every later ``examine()``. No GPU, no driver, NVML raising, no DeepSpeed answer: never an
exit, each gap is a reason.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import importlib.util
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.doctor.deepspeed_ops import OpSurvey, survey_ops
from engine.doctor.hardware_probe import HardwareProbe
from engine.doctor.nvml_probe import NvmlLibrary, default_library, driver_versions
from engine.hardware_report import (
    DoctorReport,
    Finding,
    GpuReport,
    HardwareSnapshot,
    SoftwareReport,
    Verdict,
)

GiB = 1 << 30
MIN_FREE_DISK = 2 * GiB
"""Bytes free at the run or checkpoint directory below which the run is unhealthy."""
LOW_FREE_DISK = 10 * GiB
"""Bytes free below which it is degraded (a few checkpoints of a small model)."""
LOW_RAM_FRACTION = 0.10
"""Available host RAM below this fraction of the total: degraded (the CPU path swaps)."""
TEMPERATURE_MARGIN_C = 5
"""Degraded within this many degrees of the slowdown threshold."""
FOREIGN_MEMORY_FRACTION = 0.10
"""Another process holding more than this fraction of a GPU's memory: degraded."""
NO_GPU = "no GPU: training runs on DeepSpeed's CPU accelerator"
_SEVERITY = {"info": 0, "degraded": 1, "unhealthy": 2}


class EnvironmentDoctor:
    """``examine()`` -> DoctorReport. Blocking (NVML, disks): use ``asyncio.to_thread`` on a loop."""

    def __init__(
        self,
        nvml: NvmlLibrary | None | str = "default",
        *,
        run_dir: Path | None = None,
        checkpoint_dir: Path | None = None,
        import_torch: bool = False,
        probe: HardwareProbe | None = None,
        check_ops: bool = False,
        required_ops: Sequence[str] = (),
    ) -> None:
        self.nvml: NvmlLibrary | None = default_library() if nvml == "default" else nvml  # type: ignore[assignment]
        disks = {"run": run_dir or Path.cwd()}
        if checkpoint_dir is not None:
            disks["checkpoints"] = checkpoint_dir
        # Standalone (``memtui doctor``) the only process of ours is the doctor itself.
        self.probe = probe or HardwareProbe(self.nvml, disks, lambda: {"doctor": os.getpid()})
        self.import_torch = import_torch
        self.check_ops = check_ops
        """Run the op survey (a child importing torch and DeepSpeed) on the first ``examine()``."""
        self.required_ops = list(required_ops)
        """Ops the run's optimizer needs (``engine.doctor.deepspeed_ops.required_ops``)."""
        self.op_survey: OpSurvey | None = None
        """The op survey, once taken (or handed in by the supervisor, which runs it async);
        kept: the installed ops do not change under a running run."""

    def examine(self) -> DoctorReport:
        software = self.software()
        hardware = self.probe.read()
        if hardware.gpus:
            software.accelerator, software.accelerator_count = "cuda", len(hardware.gpus)
        findings = judge(software, hardware)
        return DoctorReport(
            ts=time.time(),
            verdict=verdict_of(findings),
            findings=findings,
            software=software,
            hardware=hardware,
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
            if self.op_survey is None and self.check_ops:
                self.op_survey = survey_ops()
            if self.op_survey is not None:
                fields.update(op_fields(self.op_survey, gone))
        driver, driver_cuda, why = driver_versions(self.nvml)
        fields["driver"], fields["driver_cuda"] = driver, driver_cuda
        gone.update(why)
        if self.import_torch and torch_facts is not None:
            fields.update(_ask_torch(gone))
        return SoftwareReport(**fields, unavailable=gone)


def _ask_torch(gone: dict[str, str]) -> dict[str, Any]:
    """torch's own answer on CUDA; imported here only (slow, and never in the console)."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"accelerator": "cuda", "accelerator_count": torch.cuda.device_count()}
        return {}
    except Exception as err:
        gone["torch_cuda_runtime"] = f"{type(err).__name__}: {err}"
        return {}


def op_fields(survey: OpSurvey, gone: dict[str, str]) -> dict[str, Any]:
    """SoftwareReport fields from an op survey; no answer is a reason in ``gone``. Pure."""
    if survey.unavailable is not None:
        gone["deepspeed_op_check"] = survey.unavailable
        return {}
    return {
        # The survey's "installed" also checks the accelerator the ops were built for.
        "deepspeed_ops": {name: op.installed for name, op in survey.ops.items()},
        "deepspeed_compatible": {name: op.compatible for name, op in survey.ops.items()},
        "deepspeed_op_notes": {name: op.reason for name, op in survey.ops.items() if op.reason},
        "deepspeed_ninja": survey.ninja,
    }


def required_ops_of(run_dir: Path | None) -> list[str]:
    """The ops the run in ``run_dir`` needs (its DeepSpeed config's optimizer); [] when there
    is no readable run.json. Torch-free: the DeepSpeed config is a pure function."""
    if run_dir is None or not (run_dir / "run.json").is_file():
        return []
    from engine.deepspeed_config import build_deepspeed_config
    from engine.doctor.deepspeed_ops import required_ops
    from engine.run.directory import RunDir

    try:
        return required_ops(build_deepspeed_config(RunDir(run_dir).read_config()))
    except Exception:  # a damaged run.json or a geometry that does not divide: nothing known
        return []


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def read_module_constants(package: str, filename: str) -> dict[str, Any] | None:
    """Top-level literal assignments of ``package/filename``, without importing the package.

    None when the package is not installed; {} when the file is missing or unreadable.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            with contextlib.suppress(ValueError):
                found[target.id] = ast.literal_eval(value)
    return found


# ------------------------------------------------------------------------ verdict


def verdict_of(findings: list[Finding]) -> Verdict:
    worst = max((_SEVERITY[f.level] for f in findings), default=0)
    return ("healthy", "degraded", "unhealthy")[worst]  # type: ignore[return-value]


def judge(software: SoftwareReport, hardware: HardwareSnapshot) -> list[Finding]:
    """The findings, worst first. Pure: a function of the readings only."""
    findings = (
        _software_findings(software, hardware)
        + _op_findings(software)
        + _gpu_findings(hardware)
        + _host_findings(hardware)
    )
    return sorted(findings, key=lambda f: -_SEVERITY[f.level])


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def _software_findings(sw: SoftwareReport, hw: HardwareSnapshot) -> list[Finding]:
    out: list[Finding] = []
    if sw.torch is None:
        out.append(Finding(level="unhealthy", message="torch is not installed: the trainer cannot run"))
    if sw.deepspeed is None:
        out.append(Finding(level="unhealthy", message="deepspeed is not installed: the trainer cannot run"))
    if not hw.gpus:
        why = f" ({hw.nvml})" if hw.nvml else ""
        out.append(Finding(level="degraded", message=f"{NO_GPU}{why}"))
        if sw.torch_cuda is not None:
            out.append(
                Finding(level="info", message=f"torch is built for CUDA {sw.torch_cuda} but no GPU answers")
            )
        return out
    if sw.torch_cuda is None and sw.torch is not None:
        out.append(
            Finding(
                level="unhealthy",
                message=f"{len(hw.gpus)} GPU(s) present but torch {sw.torch} is a CPU build",
            )
        )
    elif sw.torch_cuda and sw.driver_cuda and _version_tuple(sw.driver_cuda) < _version_tuple(sw.torch_cuda):
        out.append(
            Finding(
                level="unhealthy",
                message=(
                    f"driver {sw.driver} supports CUDA up to {sw.driver_cuda}, "
                    f"but torch is built for CUDA {sw.torch_cuda}: upgrade the driver"
                ),
            )
        )
    missing = sorted(op for op, built in sw.deepspeed_ops.items() if not built)
    if missing:
        out.append(
            Finding(
                level="info", message=f"DeepSpeed ops not pre-built (JIT on first use): {', '.join(missing)}"
            )
        )
    return out


def _op_findings(sw: SoftwareReport) -> list[Finding]:
    """DeepSpeed's ops: informational, except an op the run needs that is neither pre-built
    nor buildable here (degraded: the trainer fails when it builds its optimizer)."""
    if sw.deepspeed is None:
        return []
    if "deepspeed_op_check" in sw.unavailable:
        why = sw.unavailable["deepspeed_op_check"]
        return [Finding(level="info", message=f"DeepSpeed op compatibility unavailable ({why})")]
    if not sw.deepspeed_compatible:
        return []  # the op check did not run (it is slow: ``--deep``)
    out: list[Finding] = []
    for op in sw.deepspeed_ops_required:
        if sw.deepspeed_ops.get(op):
            continue  # pre-built: nothing to compile
        if op not in sw.deepspeed_compatible:
            why = f"DeepSpeed has no {op} op for this accelerator"
        elif not sw.deepspeed_compatible[op]:
            why = sw.deepspeed_op_notes.get(op, "not compatible")
        elif sw.deepspeed_ninja is False:
            why = "ninja is missing"
        else:
            continue
        out.append(
            Finding(
                level="degraded", message=f"DeepSpeed op {op} (this run's optimizer) cannot be built: {why}"
            )
        )
    other = sorted(
        op for op, ok in sw.deepspeed_compatible.items() if not ok and op not in sw.deepspeed_ops_required
    )
    if other:
        out.append(
            Finding(level="info", message=f"DeepSpeed ops that cannot be JIT-built here: {', '.join(other)}")
        )
    if sw.deepspeed_ninja is False:
        out.append(
            Finding(level="info", message="ninja is missing: DeepSpeed ops not pre-built cannot be JIT-built")
        )
    return out


def _temperature_finding(gpu: GpuReport) -> Finding | None:
    """Within TEMPERATURE_MARGIN_C of shutdown: unhealthy; of slowdown: degraded."""
    limits = (
        ("unhealthy", "shutdown", gpu.temperature_shutdown_c),
        ("degraded", "slowdown", gpu.temperature_slowdown_c),
    )
    for level, name, limit_c in limits:
        if (
            gpu.temperature_c is not None
            and limit_c is not None
            and gpu.temperature_c >= limit_c - TEMPERATURE_MARGIN_C
        ):
            message = f"GPU {gpu.index}: {gpu.temperature_c} C, near {name} ({limit_c} C)"
            return Finding(level=level, message=message)
    return None


def _gpu_findings(hw: HardwareSnapshot) -> list[Finding]:
    out: list[Finding] = []
    for gpu in hw.gpus:
        tag = f"GPU {gpu.index}"
        if gpu.ecc_uncorrected:
            out.append(
                Finding(level="unhealthy", message=f"{tag}: {gpu.ecc_uncorrected} uncorrected ECC errors")
            )
        if (heat := _temperature_finding(gpu)) is not None:
            out.append(heat)
        if gpu.throttle_reasons:
            out.append(
                Finding(
                    level="degraded", message=f"{tag}: clocks throttled ({', '.join(gpu.throttle_reasons)})"
                )
            )
        if gpu.pcie_width and gpu.pcie_max_width and gpu.pcie_width < gpu.pcie_max_width:
            out.append(
                Finding(
                    level="degraded", message=f"{tag}: PCIe link x{gpu.pcie_width} of x{gpu.pcie_max_width}"
                )
            )
        foreign = sum(p.used_bytes or 0 for p in gpu.processes if not p.ours)
        if gpu.memory_total and foreign > FOREIGN_MEMORY_FRACTION * gpu.memory_total:
            out.append(
                Finding(level="degraded", message=f"{tag}: other processes hold {foreign / GiB:.1f} GiB")
            )
        for name, reason in sorted(gpu.unavailable.items()):
            out.append(Finding(level="info", message=f"{tag}: {name} unavailable ({reason})"))
    return out


def _host_findings(hw: HardwareSnapshot) -> list[Finding]:
    out: list[Finding] = []
    host = hw.host
    if (
        host.ram_total
        and host.ram_available is not None
        and host.ram_available < LOW_RAM_FRACTION * host.ram_total
    ):
        out.append(
            Finding(level="degraded", message=f"host RAM low: {host.ram_available / GiB:.1f} GiB available")
        )
    for disk in host.disks:
        if disk.free_bytes is None:
            out.append(
                Finding(level="info", message=f"free disk at {disk.label} unavailable ({disk.unavailable})")
            )
        elif disk.free_bytes < MIN_FREE_DISK:
            out.append(
                Finding(
                    level="unhealthy",
                    message=f"{disk.label} disk nearly full: "
                    f"{disk.free_bytes / GiB:.1f} GiB free at {disk.path}",
                )
            )
        elif disk.free_bytes < LOW_FREE_DISK:
            out.append(
                Finding(
                    level="degraded",
                    message=f"{disk.label} disk low: {disk.free_bytes / GiB:.1f} GiB free at {disk.path}",
                )
            )
    for name, reason in sorted(host.unavailable.items()):
        out.append(Finding(level="info", message=f"host {name} unavailable ({reason})"))
    return out


def render_report(report: DoctorReport) -> str:
    """The human form of ``memtui doctor``."""
    sw, hw = report.software, report.hardware
    lines = [f"verdict: {report.verdict}"]
    lines += [f"  - [{f.level}] {f.message}" for f in report.findings]
    lines.append(
        f"python {sw.python}; torch {sw.torch or '-'} (CUDA build {sw.torch_cuda or 'none'}); "
        f"deepspeed {sw.deepspeed or '-'} (accelerator {sw.deepspeed_accelerator or '-'})"
    )
    lines.append(
        f"driver {sw.driver or '-'} (CUDA {sw.driver_cuda or '-'}); "
        f"accelerator {sw.accelerator} x{sw.accelerator_count}"
    )
    lines += _op_lines(sw)
    if hw.nvml:
        lines.append(f"GPUs: none ({hw.nvml})")
    for gpu in hw.gpus:
        used = f"{(gpu.memory_used or 0) / GiB:.1f}/{(gpu.memory_total or 0) / GiB:.1f} GiB"
        lines.append(
            f"GPU {gpu.index} {gpu.name or '?'}: {used}, util {_dash(gpu.utilization_pct)}%, "
            f"{_dash(gpu.temperature_c)} C, {_dash(gpu.power_w)}/{_dash(gpu.power_limit_w)} W"
        )
    host = hw.host
    ram = f"{(host.ram_available or 0) / GiB:.1f}/{(host.ram_total or 0) / GiB:.1f} GiB available"
    lines.append(f"host: {host.cpu_count or '?'} CPUs, load {_dash(host.load_1m)}, RAM {ram}")
    for disk in host.disks:
        free = (
            f"{disk.free_bytes / GiB:.1f} GiB free"
            if disk.free_bytes is not None
            else f"unavailable ({disk.unavailable})"
        )
        lines.append(f"disk {disk.label} ({disk.path}): {free}")
    return "\n".join(lines)


def _op_lines(sw: SoftwareReport) -> list[str]:
    """DeepSpeed's ops as ``ds_report`` sees them (after ``--deep``), one line per op that
    cannot be built, with DeepSpeed's reason."""
    if "deepspeed_op_check" in sw.unavailable:
        return [f"deepspeed ops: compatibility unavailable ({sw.unavailable['deepspeed_op_check']})"]
    if not sw.deepspeed_compatible:
        return []
    built = sorted(op for op, yes in sw.deepspeed_ops.items() if yes)
    buildable = sorted(op for op, ok in sw.deepspeed_compatible.items() if ok)
    needed = ", ".join(sw.deepspeed_ops_required) or "none (torch's own optimizer)"
    lines = [
        f"deepspeed ops: pre-built {', '.join(built) or 'none'}; "
        f"JIT-buildable {', '.join(buildable) or 'none'}; "
        f"ninja {'yes' if sw.deepspeed_ninja else 'no'}; needed by the run: {needed}"
    ]
    for op, ok in sorted(sw.deepspeed_compatible.items()):
        if not ok:
            lines.append(f"  {op}: cannot be built ({sw.deepspeed_op_notes.get(op, 'not compatible')})")
    return lines


def _dash(value: object) -> str:
    """A reading, or "-" where it is unavailable (0 is a reading, not a gap)."""
    if value is None:
        return "-"
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
