"""The doctor's child process: what torch and DeepSpeed say once imported.

``python -m engine.doctor.torch_probe`` imports DeepSpeed, asks each op builder whether it
was pre-built and whether it can be JIT-built here (as ``ds_report`` does), asks torch how
many CUDA devices it can use, and prints one JSON line (``OpSurvey``) on stdout. Whatever
the libraries print goes to stderr. The only module of the doctor that imports torch: the
parent side (``engine.doctor.deepspeed_ops``) runs it with a timeout and parses the line.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from typing import Any

from engine.doctor.deepspeed_ops import OpStatus, OpSurvey

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def probe() -> OpSurvey:
    """Import DeepSpeed and ask each op builder, as ``ds_report`` does. Whatever they print
    goes to stderr: stdout carries only the answer."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            from deepspeed.accelerator import get_accelerator
            from deepspeed.git_version_info import accelerator_name, installed_ops
            from deepspeed.ops.op_builder.all_ops import ALL_OPS
            from torch.utils.cpp_extension import is_ninja_available
    except Exception as err:  # not installed, or broken: an answer, not a crash
        return OpSurvey(unavailable=f"deepspeed is not importable: {type(err).__name__}: {err}")
    accelerator = get_accelerator()._name
    ops = {}
    for name, builder in sorted(ALL_OPS.items()):
        ops[name] = _ask(builder, bool(installed_ops.get(name, False)) and accelerator_name == accelerator)
    devices, arches, error = _cuda_devices()
    return OpSurvey(
        accelerator=accelerator,
        ninja=bool(is_ninja_available()),
        ops=ops,
        cuda_devices=devices,
        cuda_arch_list=arches,
        cuda_error=error,
    )


def _cuda_devices() -> tuple[int | None, list[str], str | None]:
    """How many CUDA devices torch can use and the architectures its kernels are built
    for, or why it cannot say."""
    try:
        import torch

        if not torch.cuda.is_available():
            return 0, [], None
        return torch.cuda.device_count(), list(torch.cuda.get_arch_list()), None
    except Exception as err:
        return None, [], f"{type(err).__name__}: {err}"


def _ask(builder: Any, installed: bool) -> OpStatus:
    """One builder's answer; a check that raises is "not compatible" (as ``ds_report``)."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            compatible = bool(builder.is_compatible(verbose=True))
    except Exception as err:
        return OpStatus(installed=installed, compatible=False, reason=f"{type(err).__name__}: {err}")
    sys.stderr.write(said.getvalue())
    if compatible:
        return OpStatus(installed=installed, compatible=True)
    reason = _first_warning(said.getvalue()) or getattr(builder, "error_log", None)
    return OpStatus(installed=installed, compatible=False, reason=reason or None)


def _first_warning(printed: str) -> str | None:
    """The first line a builder printed, without colours or its ``[WARNING]`` tag (the
    first says what is missing; the later ones how to install it)."""
    for line in printed.splitlines():
        text = _ANSI.sub("", line).replace("[WARNING]", "").strip()
        if text:
            return text[:300]
    return None


def main() -> int:
    survey = probe()
    sys.stdout.write(json.dumps(survey.model_dump(mode="json")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
