"""The doctor's rules: readings in, findings and a verdict out. Pure: no I/O, no clock.

Each finding has a level (info, degraded, unhealthy) and a message a person reads; the
verdict is the worst level. A missing reading is an info finding that says why, never an
error: a machine without a GPU or NVML still gets a verdict.
"""

from __future__ import annotations

from engine.doctor.gpu_architecture import architecture_findings
from engine.hardware_report import (
    DiskReport,
    Finding,
    GpuReport,
    HardwareSnapshot,
    SoftwareReport,
    Verdict,
)
from engine.measures.disk_space import FreeSpaceThreshold, GiB, MiB, byte_size

MIN_FREE_DISK = FreeSpaceThreshold(fraction=0.05, cap_bytes=2 * GiB, floor_bytes=16 * MiB)
"""Free at the run or checkpoint directory below which the run is unhealthy."""
LOW_FREE_DISK = FreeSpaceThreshold(fraction=0.20, cap_bytes=10 * GiB, floor_bytes=64 * MiB)
"""Free below which it is degraded (a few checkpoints of a small model)."""
LOW_RAM_FRACTION = 0.10
"""Available host RAM below this fraction of the total: degraded (the CPU path swaps)."""
TEMPERATURE_MARGIN_C = 5
"""Degraded within this many degrees of the slowdown threshold."""
FOREIGN_MEMORY_FRACTION = 0.10
"""Another process holding more than this fraction of a GPU's memory: degraded."""
CANNOT_ATTRIBUTE = "cannot be attributed: NVML reports pids of another pid namespace (a container)"
NO_GPU = "no GPU: training runs on DeepSpeed's CPU accelerator"
_SEVERITY = {"info": 0, "degraded": 1, "unhealthy": 2}
WSL2_LIMITS = (
    "WSL2: CUDA runs through Windows' driver, with its limits: pinned host memory is capped "
    "(large pinned buffers, as CPU offload uses, may fail to allocate), unified memory cannot "
    "oversubscribe, and several GPUs talk without peer-to-peer (NCCL over host memory, slower); "
    "install the NVIDIA driver on Windows, not inside WSL"
)


def is_wsl(kernel: str | None) -> bool:
    """A WSL kernel (its release names Microsoft, e.g. ``5.15.153.1-microsoft-standard-WSL2``)."""
    return kernel is not None and "microsoft" in kernel.lower()


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
        + architecture_findings(software, hardware)
        + _host_findings(hardware)
    )
    return sorted(findings, key=severity_order)


def severity_order(finding: Finding) -> int:
    """Sort key: worst first."""
    return -_SEVERITY[finding.level]


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
    else:
        out.extend(_driver_findings(sw))
    missing = sorted(op for op, built in sw.deepspeed_ops.items() if not built)
    if missing:
        out.append(
            Finding(
                level="info", message=f"DeepSpeed ops not pre-built (JIT on first use): {', '.join(missing)}"
            )
        )
    return out


def _driver_findings(sw: SoftwareReport) -> list[Finding]:
    """The driver against torch's CUDA build, by CUDA's compatibility rules: a driver of an
    older major version cannot run the build (unhealthy); one of the same major but an
    older minor runs it under minor-version compatibility (info: only features that need
    the newer driver, such as JIT-compiling newer PTX, are missing)."""
    if not (sw.torch_cuda and sw.driver_cuda):
        return []
    driver, built = _version_tuple(sw.driver_cuda), _version_tuple(sw.torch_cuda)
    if driver >= built:
        return []
    said = f"driver {sw.driver} supports CUDA up to {sw.driver_cuda}, torch is built for CUDA {sw.torch_cuda}"
    if driver[:1] < built[:1]:
        return [Finding(level="unhealthy", message=f"{said}: an older major version, upgrade the driver")]
    return [
        Finding(
            level="info",
            message=f"{said}: runs under CUDA minor-version compatibility (no PTX JIT of newer code)",
        )
    ]


def _op_findings(sw: SoftwareReport) -> list[Finding]:
    """DeepSpeed's ops: informational, except an op the run needs that is neither pre-built
    nor buildable here (degraded: the trainer fails when it builds its optimizer)."""
    if sw.deepspeed is None:
        return []
    if "deepspeed_op_check" in sw.unavailable:
        why = sw.unavailable["deepspeed_op_check"]
        return [Finding(level="info", message=f"DeepSpeed op compatibility unavailable ({why})")]
    to_build = [op for op in sw.deepspeed_ops_required if not sw.deepspeed_ops.get(op)]
    if to_build and sw.cxx_compiler is None:
        needs = f"DeepSpeed op{'s' if len(to_build) > 1 else ''} {', '.join(to_build)} (this run's optimizer)"
        fix = "install one (Debian/Ubuntu: apt install g++) or use memtui's default AdamW"
        return [
            Finding(level="degraded", message=f"{needs} must be built and there is no C++ compiler: {fix}")
        ]
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
        unattributed = sum(1 for p in gpu.processes if p.ours is None)
        if unattributed:
            out.append(Finding(level="info", message=f"{tag}: {unattributed} process(es) {CANNOT_ATTRIBUTE}"))
        foreign = sum(p.used_bytes or 0 for p in gpu.processes if p.ours is False)
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
    if is_wsl(host.kernel):
        out.append(Finding(level="info" if len(hw.gpus) <= 1 else "degraded", message=WSL2_LIMITS))
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
        elif disk.free_bytes < MIN_FREE_DISK.bytes_for(disk.total_bytes):
            out.append(Finding(level="unhealthy", message=f"{disk.label} disk nearly full: {_free(disk)}"))
        elif disk.free_bytes < LOW_FREE_DISK.bytes_for(disk.total_bytes):
            out.append(Finding(level="degraded", message=f"{disk.label} disk low: {_free(disk)}"))
    for name, reason in sorted(host.unavailable.items()):
        out.append(Finding(level="info", message=f"host {name} unavailable ({reason})"))
    return out


def _free(disk: DiskReport) -> str:
    """``35.0 MiB free of 38.1 MiB at /path``."""
    total = f" of {byte_size(disk.total_bytes)}" if disk.total_bytes else ""
    return f"{byte_size(disk.free_bytes or 0)} free{total} at {disk.path}"
