"""The stages of ``bench/gpu_check.py``: each takes the session, returns its key figures, or
raises ``StageFailed`` / ``StageSkipped``. Sizes per mode: CUDA (the real check), CPU, and
CPU ``--quick`` (the test suite's)."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpu_check_session import Check, StageFailed, StageSkipped

TERMINAL = ("stopped", "completed", "failed", "interrupted")
STATUS_EVERY_S = 5.0  # between two ``memtui status`` of a preset run: a few live ones on CUDA
PID_POLL_S = 0.2  # between two looks at whether the supervisor still runs (a signal 0)
STATUS_FIGURES = ("state", "step", "target_steps", "exit_reason", "loss", "loss_scale", "tokens_per_s")
STATUS_FIGURES += ("mfu", "model_tflops", "micro_batch", "grad_accum", "restarts")
OVERHEAD_CUDA = {"preset": "small", "precision": "bf16", "rounds": 6, "steps": 20, "warmup": 20}
OVERHEAD_CPU = {"preset": "tiny", "precision": "fp16", "rounds": 2, "steps": 3, "warmup": 2}
WANTED_ON_CUDA = ("mem_device_used", "mem_fragmentation")
"""Status keys a CUDA run should fill: listed as missing when neither the final nor the live
status carries a value for them."""

ENVIRONMENT_PROBE = """
import json, sys, importlib
found = {"python": sys.version.split()[0], "executable": sys.executable}
import torch
found.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda=torch.cuda.is_available())
if found["cuda"]:
    found.update(device=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()),
                 arch_list=torch.cuda.get_arch_list(), bf16=torch.cuda.is_bf16_supported(),
                 capacity=torch.cuda.get_device_properties(0).total_memory)
for name in ("deepspeed", "pydantic", "textual", "platformdirs", "hjson", "pytest_asyncio", "memtui"):
    module = importlib.import_module(name)
    found[name] = [getattr(module, "__version__", None), module.__file__]
print(json.dumps(found))
"""


def sizes(check: Check) -> dict[str, Any]:
    """Steps and sizes for this mode: a few hundred steps on CUDA, a handful on the CPU.
    ``oom``: preset, budget (GiB), micro-batch at ZeRO 0-2 and at ZeRO 3 (each OOM there is a
    restart, ~15-20 s), steps."""
    if not check.cpu:
        # small at micro-batch 256 wants ~7 GB of activations (memtui plan): far over 1 GiB
        oom = ["small", 1.0, 256, 64, 10 if check.quick else 30]
        steps = {"tiny": 100, "small": 50} if check.quick else {"tiny": 300, "small": 200}
        return {"steps": steps, "run_timeout": 90, "oom": oom, "oom_timeout": 150}
    steps = {"tiny": 4, "small": 2} if check.quick else {"tiny": 20, "small": 4}
    # 0.55 GiB: micro-batch 128 goes over it (RSS ~630 MB at ZeRO 0, ~650 MB at ZeRO 3) and 64
    # fits at ZeRO 0 (one OOM); at ZeRO 3 one or two restarts
    oom = ["tiny", 0.55, 128, 128, 2 if check.quick else 8]
    return {"steps": steps, "run_timeout": 150, "oom": oom, "oom_timeout": 300}


def wheels(check: Check) -> dict[str, Any]:
    house = check.args.wheelhouse
    if house is None:
        raise StageSkipped("no --wheelhouse: the environment's own packages are used")
    found = sorted(str(p) for p in Path(house).glob("*.whl"))
    if not found:
        raise StageFailed(f"no wheels in {house} (build them with bench/gpu_wheels.sh, carry the folder)")
    site = check.args.site
    pip = ["-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade"]
    check.checked(check.python(*pip, "--target", str(site), *found), 180, "pip install")
    check.add_site(site)
    return {"wheels": [Path(w).name for w in found], "site": str(site)}


def environment(check: Check) -> dict[str, Any]:
    output = check.checked(check.python("-c", ENVIRONMENT_PROBE), 120, "import check")
    found = json.loads(output.strip().splitlines()[-1])  # DeepSpeed may print lines before it
    memtui_file = found["memtui"][1]
    if not memtui_file.startswith(str(check.repo)):
        raise StageFailed(f"memtui imported from {memtui_file}, not this checkout", found)
    if not check.cpu and not found["cuda"]:
        raise StageFailed("no CUDA device here (torch.cuda.is_available() is False): use --cpu", found)
    return found


def doctor(check: Check) -> dict[str, Any]:
    report = check.memtui_json("doctor", timeout=120)
    software = report.get("software", {})
    figures = {
        "verdict": report.get("verdict"),
        "findings": [
            f"{f['level']}: {f['message']}" for f in report.get("findings", []) if f["level"] != "info"
        ],
        "software": {
            k: software.get(k) for k in ("torch", "torch_cuda", "driver", "driver_cuda", "deepspeed")
        },
        "gpus": report.get("hardware", {}).get("gpus", []),
    }
    if figures["verdict"] == "unhealthy":
        raise StageFailed(f"verdict unhealthy: {'; '.join(figures['findings'])[:400]}", figures)
    if not check.cpu and not figures["gpus"]:
        raise StageFailed("the doctor sees no GPU", figures)
    return figures


def plan(check: Check) -> dict[str, Any]:
    report = check.memtui_json("plan", "--set", "preset=small", timeout=60)
    hardware = report.get("hardware", {})
    figures = {
        "hardware": hardware,
        "per_gpu": report.get("per_gpu"),
        "recommendation": report.get("recommendation"),
    }
    if not check.cpu and hardware.get("device") == "cpu":
        raise StageFailed("plan sees no GPU (NVML)", figures)
    if not check.cpu and hardware.get("peak_tflops") is None:
        raise StageFailed(f"the peak table does not know {hardware.get('device')!r}: no MFU", figures)
    return figures


@contextlib.contextmanager
def live_run(check: Check, name: str, *options: str) -> Iterator[dict[str, Any]]:
    """``memtui run --detach`` started; what it printed (run_id, supervisor_pid). Stopped on
    the way out if it still runs."""
    started: dict[str, Any] = check.memtui_json("run", "--detach", "--name", name, *options, timeout=60)
    try:
        yield started
    finally:
        with contextlib.suppress(StageFailed):
            status = check.memtui_json("status", started["run_id"], timeout=30)
            if status.get("state") not in TERMINAL:
                check.command(check.memtui("stop", started["run_id"], "--timeout", "60"), 90, "memtui stop")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_status(
    check: Check, started: dict[str, Any], timeout: float, every_s: float, until: Callable[[Any], bool]
) -> Any:
    """``memtui status --json`` every ``every_s`` (each is a Python start, ~0.3 s of a core)
    and once the supervisor has exited, until ``until(status)`` or a terminal state; the last
    status seen with the run live is kept under ``"live"``."""
    run_id, pid = started["run_id"], started["supervisor_pid"]
    deadline = time.monotonic() + timeout
    live: dict[str, Any] = {}
    while True:
        status = check.memtui_json("status", run_id, timeout=30)
        if status.get("state") == "running":
            live = status
        if until(status) or status.get("state") in TERMINAL:
            status["live"] = live
            return status
        if time.monotonic() > deadline:
            state, step = status.get("state"), status.get("step")
            raise StageFailed(f"{run_id} still {state} at step {step} after {timeout:.0f} s")
        next_status = time.monotonic() + every_s
        while time.monotonic() < next_status and alive(pid):
            time.sleep(PID_POLL_S)


def memory_figures(status: dict[str, Any]) -> dict[str, Any]:
    """Every memory key status has (allocated, reserved, peak, capacity, device used, ...)."""
    return {k: v for k, v in status.items() if k.startswith("mem_") or "device" in k or "frag" in k}


def preset_run(preset: str, precision: str) -> Callable[[Check], dict[str, Any]]:
    def stage(check: Check) -> dict[str, Any]:
        steps = sizes(check)["steps"][preset]
        options = ["--preset", preset, "--steps", str(steps), "--set", f"train.precision={precision}"]
        options += ["--set", "checkpoint.every_steps=0"]
        if check.quick and preset == "small":
            options += ["--set", "train.global_batch=16"]  # one micro-batch per step on 2 cores
        with live_run(check, f"gc-{preset}-{precision}", *options) as started:
            timeout = sizes(check)["run_timeout"]
            final = wait_status(check, started, timeout, STATUS_EVERY_S, lambda s: False)
        figures = {k: final.get(k) for k in STATUS_FIGURES}
        figures["memory"] = memory_figures(final)
        figures["live_memory"] = memory_figures(final["live"])
        if not check.cpu:
            live = final["live"]
            figures["missing"] = [k for k in WANTED_ON_CUDA if final.get(k) is None and live.get(k) is None]
        if final.get("state") != "completed":
            raise StageFailed(f"ended {final.get('state')}: {final.get('exit_reason')}", figures)
        if not check.cpu and final.get("mem_kind") != "cuda":
            raise StageFailed(f"memory measured as {final.get('mem_kind')!r}, not cuda", figures)
        return figures

    return stage


def oom(zero_stage: int, only: str | None, overlap: bool) -> Callable[[Check], dict[str, Any]]:
    def stage(check: Check) -> dict[str, Any]:
        preset, budget, micro, micro_zero3, steps = sizes(check)["oom"]
        micro = micro_zero3 if zero_stage == 3 else micro
        result = check.out / f"oom-zero{zero_stage}.json"
        argv = ["bench/cuda_oom.py", "--preset", preset, "--budget-gib", str(budget)]
        argv += ["--micro-batch", str(micro), "--steps", str(steps), "--zero-stage", str(zero_stage)]
        timeout = sizes(check)["oom_timeout"]
        argv += ["--json", str(result), "--timeout", str(timeout)]
        argv += (["--cpu"] if check.cpu else []) + (["--overlap-comm"] if overlap else [])
        argv += ["--only", only] if only else []
        check.checked(check.python(*argv), timeout, "cuda_oom.py")
        figures: dict[str, Any] = json.loads(result.read_text())
        result.unlink()  # its figures are in the summary; $OUT brings back few files
        judge_oom(figures, zero_stage, steps, f"{budget} GiB at micro-batch {micro}")
        return figures

    return stage


def judge_oom(figures: dict[str, Any], zero_stage: int, steps: int, setting: str) -> None:
    """Fail unless every run reached its target step, the budget really caused an OOM, and
    it was recovered as the stage says: redone in place at ZeRO 0-2, by a restart at ZeRO 3."""
    for part, run in ((k, figures[k]) for k in ("oom", "predict") if k in figures):
        if run["last_step"] < steps or run["exhausted"]:
            reason = f"{part} run stopped at step {run['last_step']} of {steps}: {run['exhausted']}"
            raise StageFailed(reason, figures)
    found = figures.get("oom")
    if found and found["ooms"] + found["restarts"] == 0:
        raise StageFailed(f"no OOM under {setting}: nothing was tested", figures)
    if found and zero_stage < 3 and found["restarts"]:
        reason = f"the trainer was restarted at ZeRO {zero_stage}: an OOM there is redone in place"
        raise StageFailed(reason, figures)


def oom_forensics(check: Check) -> dict[str, Any]:
    """A real OOM with the allocator history on: ``memtui oom`` lists its breakdown (and on
    CUDA its snapshot, a pickle of ``segments``); on CUDA the history's cost per step."""
    result = check.out / "oom-forensics.json"
    argv = ["bench/oom_forensics.py", "--json", str(result)]
    argv += (["--cpu"] if check.cpu else []) + (["--quick"] if check.quick else [])
    check.checked(check.python(*argv), 300, "oom_forensics.py")
    figures: dict[str, Any] = json.loads(result.read_text())
    result.unlink()
    run = figures["run"]
    try:
        rows = check.memtui_json("oom", run["run_dir"], timeout=60)
        figures["listed"] = [{k: r[k] for k in ("step", "outcome", "snapshot_file")} for r in rows]
        snapshots = [Path(r["snapshot_file"]) for r in rows if r["snapshot_file"]]
        figures["snapshot_bytes"] = [p.stat().st_size for p in snapshots]
        if snapshots:
            figures["snapshot_keys"] = sorted(pickle.loads(snapshots[-1].read_bytes()))
    finally:
        shutil.rmtree(run["home"], ignore_errors=True)
    if not rows:
        raise StageFailed(f"no OOM listed by memtui oom (the run exited {run['exit']})", figures)
    if not check.cpu and "segments" not in figures.get("snapshot_keys", []):
        raise StageFailed("no allocator snapshot with segments written at the OOM", figures)
    return figures


def overhead(check: Check) -> dict[str, Any]:
    result = check.out / "overhead.json"
    sized = OVERHEAD_CPU if check.cpu else OVERHEAD_CUDA
    argv = [part for key, value in sized.items() for part in (f"--{key}", str(value))]
    check.checked(check.python("bench/overhead.py", *argv, "--json", str(result)), 180, "overhead.py")
    figures: dict[str, Any] = json.loads(result.read_text())
    result.unlink()
    return figures


def console(check: Check) -> dict[str, Any]:
    preset, precision = ("tiny", "fp16") if check.cpu else ("small", "bf16")
    options = ["--preset", preset, "--steps", "100000", "--set", f"train.precision={precision}"]
    options += ["--set", "checkpoint.every_steps=0"]
    svg = check.out / "console.svg"
    with live_run(check, "gc-console", *options) as started:
        status = wait_status(check, started, 120, 1.0, lambda s: (s.get("step") or 0) >= 2)
        if status.get("state") != "running":
            raise StageFailed(f"the run to attach to is {status.get('state')}: {status.get('exit_reason')}")
        shot = check.checked(
            check.python("bench/console_shot.py", status["run_dir"], str(svg)), 120, "console_shot.py"
        )
    figures: dict[str, Any] = json.loads(shot)
    figures["svg"] = svg.name
    return figures


QUICK_PLAN: dict[str, float] = {
    "wheels": 50.0,
    "environment": 40.0,
    "doctor": 30.0,
    "run-tiny-bf16": 60.0,
    "oom-zero0": 60.0,
    "console": 40.0,
    "plan": 15.0,
    "run-small-fp16": 70.0,
    "oom-zero3": 60.0,
}
"""``--quick``: the stages of the first call, most important first, each with its cap (s):
a stage that reaches its cap fails named, and the next begins. The caps sum to 425 s, under
the 450 s deadline with its margin, inside one 8-minute device call; the other stages are
the full check's, a second call."""

STAGES: dict[str, Callable[[Check], dict[str, Any]]] = {
    "wheels": wheels,
    "environment": environment,
    "doctor": doctor,
    "plan": plan,
    "run-tiny-fp16": preset_run("tiny", "fp16"),
    "run-tiny-bf16": preset_run("tiny", "bf16"),
    "run-small-fp16": preset_run("small", "fp16"),
    "run-small-bf16": preset_run("small", "bf16"),
    "oom-zero0": oom(0, None, overlap=False),
    "oom-zero1": oom(1, "oom", overlap=True),
    "oom-zero2": oom(2, "oom", overlap=True),
    "oom-zero3": oom(3, "oom", overlap=False),
    "overhead": overhead,
    "console": console,
    "oom-forensics": oom_forensics,
}
