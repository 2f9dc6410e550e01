"""Does torch have kernels for this GPU? Its compute capability (NVML) against
``torch.cuda.get_arch_list()`` (the op survey's child), by CUDA's compatibility rules. Pure.

- ``sm_XY`` machine code runs on capability X.Z for Z >= Y (same major); ``sm_XYa`` only
  on X.Y exactly; ``sm_XYf`` on the X family, Z >= Y.
- ``compute_XY`` PTX is JIT-compiled by the driver for any capability >= X.Y (a slow
  first start, and the driver must be as new as torch's CUDA).
- Neither: every kernel fails with "no kernel image is available for execution on the
  device", the classic failure of a new card (RTX 50, sm_120) with an older torch wheel.
"""

from __future__ import annotations

import re

from engine.hardware_report import Finding, HardwareSnapshot, SoftwareReport

_ARCH = re.compile(r"^(sm|compute)_(\d+?)(\d)([af]?)$")


def _parse(arch: str) -> tuple[str, int, int, str] | None:
    """``sm_120a`` -> ("sm", 12, 0, "a"); None for what is not an architecture name."""
    found = _ARCH.match(arch)
    if found is None:
        return None
    kind, major, minor, suffix = found.groups()
    return kind, int(major), int(minor), suffix


def runs_on(capability: tuple[int, int], arches: list[str]) -> str:
    """``native``, ``ptx`` (JIT from PTX) or ``none`` for a GPU of ``capability``."""
    major, minor = capability
    ptx = False
    for name in arches:
        parsed = _parse(name)
        if parsed is None:
            continue
        kind, a_major, a_minor, suffix = parsed
        if kind == "sm" and a_major == major and (a_minor == minor or (a_minor < minor and suffix != "a")):
            return "native"
        if kind == "compute" and not suffix and (a_major, a_minor) <= (major, minor):
            ptx = True
    return "ptx" if ptx else "none"


def architecture_findings(sw: SoftwareReport, hw: HardwareSnapshot) -> list[Finding]:
    """One finding per kind of GPU torch has no machine code for; none when torch's list is
    unknown (the op survey did not run) or every GPU is covered."""
    if not sw.torch_arch_list:
        return []
    out: list[Finding] = []
    seen: set[tuple[str | None, str]] = set()
    for gpu in hw.gpus:
        if gpu.compute_capability is None or (gpu.name, gpu.compute_capability) in seen:
            continue
        seen.add((gpu.name, gpu.compute_capability))
        major, minor = (int(p) for p in gpu.compute_capability.split("."))
        verdict = runs_on((major, minor), sw.torch_arch_list)
        card = f"{gpu.name or f'GPU {gpu.index}'} (sm_{major}{minor})"
        built = ", ".join(sw.torch_arch_list)
        if verdict == "none":
            out.append(
                Finding(
                    level="unhealthy",
                    message=f"torch {sw.torch} has no kernels for {card}, only {built}: "
                    "install a torch built for this GPU",
                )
            )
        elif verdict == "ptx":
            out.append(
                Finding(
                    level="info",
                    message=f"torch {sw.torch} has no machine code for {card} ({built}): its "
                    "kernels are JIT-compiled from PTX on first use",
                )
            )
    return out
