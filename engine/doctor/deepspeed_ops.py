"""DeepSpeed's ops on this machine: pre-built or not, and whether each can be JIT-built here.

What ``ds_report`` shows as "installed" and "compatible": for each op builder DeepSpeed
knows for the accelerator it detects (``deepspeed.ops.op_builder.all_ops.ALL_OPS``),
``installed`` says it was pre-built at install for this accelerator, and ``compatible`` that
``builder.is_compatible()`` finds what a just-in-time build needs (compiler, headers,
libraries); torch says how many CUDA devices it can use. Asking means importing torch and
DeepSpeed (seconds, and both may print), so the child ``python -m engine.doctor.torch_probe``
answers, as one JSON line on stdout;
``survey_ops`` (blocking) and ``survey_ops_async`` run it with a timeout and ``parse_survey``
turns whatever came back into an ``OpSurvey``. A timeout, a crash, garbage or a missing
DeepSpeed is ``unavailable`` with the reason, never an exception.

Torch-free: only the child (``engine.doctor.torch_probe``) imports torch and DeepSpeed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

import engine
from engine.extension_cache import with_extensions_dir

SURVEY_TIMEOUT_S = 60.0
"""Seconds the child gets: importing torch and DeepSpeed takes several on a small machine,
and some ``is_compatible`` checks compile a test program."""
MODULE = "engine.doctor.torch_probe"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SOURCE_ROOT = Path(engine.__file__).resolve().parent.parent
"""Where ``engine`` lives: the child imports it from here whatever its working directory."""


class OpStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    installed: bool
    """Pre-built at install, for the accelerator DeepSpeed detects now."""
    compatible: bool
    """Can be JIT-built here (``builder.is_compatible()``)."""
    reason: str | None = None
    """Why not, in DeepSpeed's words (its builder's last warning), when it is not compatible."""


class OpSurvey(BaseModel):
    """The child's answer, or why there is none."""

    model_config = ConfigDict(extra="forbid")

    accelerator: str | None = None
    """The accelerator DeepSpeed detected (``cuda``, ``cpu``...)."""
    ninja: bool | None = None
    """ninja found: JIT builds need it (None when unknown)."""
    ops: dict[str, OpStatus] = {}
    cuda_devices: int | None = None
    """CUDA devices torch itself can use (0: none); None when torch could not say."""
    cuda_arch_list: list[str] = []
    """``torch.cuda.get_arch_list()`` where CUDA works (``sm_80``, ``compute_90``...)."""
    cuda_error: str | None = None
    """Why torch could not say (its import or CUDA initialisation failed)."""
    unavailable: str | None = None
    """Why there is no answer (no DeepSpeed, a timeout, a crash); None when there is one."""


# ------------------------------------------------------------------ the parent's side


def command(python: str = sys.executable) -> list[str]:
    return [python, "-m", MODULE]


def _child_env() -> dict[str, str]:
    env = with_extensions_dir(os.environ)  # the cache the trainers use, should a check build
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_SOURCE_ROOT), env.get("PYTHONPATH")) if p)
    return env


def parse_survey(returncode: int | None, stdout: str, stderr: str) -> OpSurvey:
    """The survey the child printed: its last line that parses (DeepSpeed may print first).

    Pure: a non-zero exit or no parsable line is ``unavailable``, with stderr's last line.
    """
    if returncode != 0:
        return OpSurvey(unavailable=f"op check exited with status {returncode}{_last_words(stderr)}")
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(ValidationError):
                return OpSurvey.model_validate_json(line)
    return OpSurvey(unavailable=f"op check printed no answer{_last_words(stderr)}")


def _last_words(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f": {lines[-1][:300]}" if lines else ""


def timed_out(timeout_s: float) -> OpSurvey:
    return OpSurvey(unavailable=f"op check did not answer within {timeout_s:g} s")


def survey_ops(timeout_s: float = SURVEY_TIMEOUT_S, python: str = sys.executable) -> OpSurvey:
    """Run the child and wait (blocking: seconds). Its process group is killed on timeout
    (an ``is_compatible`` check may have started a compiler)."""
    try:
        proc = subprocess.Popen(
            command(python),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=_child_env(),
            start_new_session=True,
        )
    except OSError as err:
        return OpSurvey(unavailable=f"op check could not start: {err}")
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.communicate()
        return timed_out(timeout_s)
    return parse_survey(proc.returncode, stdout, stderr)


async def survey_ops_async(timeout_s: float = SURVEY_TIMEOUT_S, python: str = sys.executable) -> OpSurvey:
    """``survey_ops`` for an event loop; cancelling it kills the child's process group."""
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *command(python),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            env=_child_env(),
            start_new_session=True,
        )
    )
    try:
        proc = await asyncio.shield(starting)
    except OSError as err:
        return OpSurvey(unavailable=f"op check could not start: {err}")
    except asyncio.CancelledError:
        # Cancelled while the child started (its pipes are connected after it runs): asyncio
        # would kill the child alone, and whatever it started (a compiler) would live on.
        with contextlib.suppress(Exception):
            started = await starting
            _kill_group(started.pid)
            await started.wait()
        raise
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        return timed_out(timeout_s)
    except asyncio.CancelledError:
        _kill_group(proc.pid)
        await proc.wait()
        raise
    return parse_survey(proc.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace"))


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
