"""Does torch have kernels for this GPU? Its compute capability (NVML) against
``torch.cuda.get_arch_list()`` (the op survey's child), by CUDA's compatibility rules. Pure.

- ``sm_XY`` machine code runs on capability X.Z for Z >= Y (same major); ``sm_XYa`` only
  on X.Y exactly; ``sm_XYf`` on the X family, Z >= Y.
- ``compute_XY`` PTX is JIT-compiled by the driver for any capability >= X.Y (a slow
  first start, and the driver must be as new as torch's CUDA).
- Neither: every kernel fails with "no kernel image is available for execution on the
  device", the classic failure of a new card (RTX 50, sm_120) with an older torch wheel.

Without the arch list (it needs torch imported: ``doctor --deep`` or a running trainer),
the CUDA version torch was built for (``torch/version.py``, read without importing torch)
says the same for the cases that matter: a CUDA older than the first to know the GPU's
architecture, or CUDA 13, which dropped everything before Turing (``cuda_build_problem``).
"""

from __future__ import annotations

import re

from engine.hardware_report import Finding, HardwareSnapshot, SoftwareReport

FIRST_CUDA = (((10, 0), (12, 8)), ((9, 0), (11, 8)), ((8, 9), (11, 8)), ((8, 6), (11, 1)), ((8, 0), (11, 0)))
"""(compute capability, the first CUDA release that compiles for it), newest first:
Blackwell (sm_100 and up, RTX 50's sm_120) 12.8, Hopper and Ada 11.8, Ampere 11.1 / 11.0."""
OLDEST_IN_CUDA_13 = (7, 5)
"""CUDA 13 compiles for Turing (7.5) and later only: Maxwell, Pascal and Volta are gone."""

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


def _version(text: str | None) -> tuple[int, int] | None:
    """``"12.8"`` -> (12, 8); None for a CPU build or what is not a version."""
    major, _, rest = (text or "").partition(".")
    minor = rest.split(".")[0]
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def cuda_build_problem(capability: tuple[int, int], torch_cuda: str | None) -> str | None:
    """Why a torch built for CUDA ``torch_cuda`` has no kernels for a GPU of ``capability``;
    None when it has (or a CPU build, which other checks name)."""
    built = _version(torch_cuda)
    if built is None:
        return None
    if built >= (13, 0) and capability < OLDEST_IN_CUDA_13:
        return (
            f"torch is built for CUDA {torch_cuda}, which has no kernels for compute capability "
            f"{capability[0]}.{capability[1]} (CUDA 13 starts at 7.5): install a torch built for CUDA 12"
        )
    first = next((cuda for cap, cuda in FIRST_CUDA if capability >= cap), None)
    if first is not None and built < first:
        return (
            f"torch is built for CUDA {torch_cuda}, older than {first[0]}.{first[1]}, the first to "
            f"compile for compute capability {capability[0]}.{capability[1]}: install a torch built "
            f"for CUDA {first[0]}.{first[1]} or later"
        )
    return None


def architecture_findings(sw: SoftwareReport, hw: HardwareSnapshot) -> list[Finding]:
    """One finding per kind of GPU torch has no machine code for: by torch's arch list when
    the op survey ran, else by the CUDA torch was built for; none when every GPU is covered."""
    out: list[Finding] = []
    for card, capability in _kinds_of_gpu(hw):
        judge = _by_arch_list if sw.torch_arch_list else _by_cuda_build
        finding = judge(sw, card, capability)
        if finding is not None:
            out.append(finding)
    return out


def _kinds_of_gpu(hw: HardwareSnapshot) -> list[tuple[str, tuple[int, int]]]:
    """(its name, its compute capability) once per kind of GPU NVML read a capability for."""
    kinds: dict[tuple[str, tuple[int, int]], None] = {}
    for gpu in hw.gpus:
        capability = _version(gpu.compute_capability)
        if capability is not None:
            kinds[(gpu.name or f"GPU {gpu.index}", capability)] = None
    return list(kinds)


def _by_arch_list(sw: SoftwareReport, name: str, capability: tuple[int, int]) -> Finding | None:
    verdict = runs_on(capability, sw.torch_arch_list)
    card = f"{name} (sm_{capability[0]}{capability[1]})"
    built = ", ".join(sw.torch_arch_list)
    if verdict == "none":
        message = (
            f"torch {sw.torch} has no kernels for {card}, only {built}: install a torch built for this GPU"
        )
        return Finding(level="unhealthy", message=message)
    if verdict == "ptx":
        message = (
            f"torch {sw.torch} has no machine code for {card} ({built}): its kernels are "
            "JIT-compiled from PTX on first use"
        )
        return Finding(level="info", message=message)
    return None


def _by_cuda_build(sw: SoftwareReport, name: str, capability: tuple[int, int]) -> Finding | None:
    problem = cuda_build_problem(capability, sw.torch_cuda)
    return None if problem is None else Finding(level="unhealthy", message=f"{name}: {problem}")
