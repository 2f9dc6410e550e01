"""The doctor's report as text: what ``memtui doctor`` prints without ``--json``."""

from __future__ import annotations

from engine.hardware_report import (
    DoctorReport,
    InterconnectReport,
    SoftwareReport,
)
from engine.measures.disk_space import GiB, byte_size


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
            f"{byte_size(disk.free_bytes)} free"
            if disk.free_bytes is not None
            else f"unavailable ({disk.unavailable})"
        )
        lines.append(f"disk {disk.label} ({disk.path}): {free}")
    lines += _interconnect_lines(report.interconnect)
    return "\n".join(lines)


def _interconnect_lines(links: InterconnectReport | None) -> list[str]:
    """One line per InfiniBand port, then the rendezvous; "not checked" where it was not."""
    if links is None:
        return []
    if links.infiniband is None:
        lines = [f"InfiniBand: not checked ({links.unavailable.get('infiniband', '?')})"]
    else:
        lines = [f"InfiniBand: {len(links.infiniband)} port(s)"]
        lines += [
            f"  {p.device} port {p.port}: {p.state or '?'} ({p.phys_state or '?'}), "
            f"{p.rate or 'rate ?'}, {p.link_layer or 'link ?'}"
            for p in links.infiniband
        ]
    rdzv = links.rendezvous
    if rdzv is None:
        lines.append(f"rendezvous: not checked ({links.unavailable.get('rendezvous', '?')})")
    else:
        answer = "reachable" if rdzv.reachable else "NOT reachable"
        lines.append(f"rendezvous {rdzv.endpoint}: {answer} ({rdzv.detail})")
    return lines


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
