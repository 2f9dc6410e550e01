"""``memtui doctor`` and ``python -m engine doctor`` through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)


def memtui_command() -> list[str]:
    script = Path(sys.executable).with_name("memtui")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memtui.cli.main"]


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    home = tempfile.mkdtemp(prefix="mt", dir="/tmp")
    env = dict(os.environ, MEMTUI_HOME=home)
    return subprocess.run(command, capture_output=True, text=True, timeout=150, env=env)


def has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.slow
def test_memtui_doctor_json_exits_zero_with_verdict_and_reasons() -> None:
    done = run([*memtui_command(), "doctor", "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] in ("healthy", "degraded")
    assert report["software"]["python"] and report["hardware"]["host"]["cpu_count"]
    disks = {d["label"]: d for d in report["hardware"]["host"]["disks"]}
    assert set(disks) == {"run", "checkpoints"} and all(d["free_bytes"] for d in disks.values())
    assert disks["checkpoints"]["path"].endswith("/runs")  # where every run's checkpoints/ will be
    assert [p["role"] for p in report["hardware"]["host"]["processes"]] == ["doctor"]  # no supervisor here
    if not has_gpu():
        assert report["hardware"]["gpus"] == [] and report["hardware"]["nvml"]
        assert report["software"]["accelerator"] == "cpu"
        reasons = [f["message"] for f in report["findings"] if f["level"] != "info"]
        assert any(r.startswith("no GPU: training runs on DeepSpeed's CPU accelerator") for r in reasons)


@pytest.mark.slow
def test_memtui_doctor_text() -> None:
    done = run([*memtui_command(), "doctor"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("verdict: ") and "host:" in done.stdout


@pytest.mark.slow
def test_engine_doctor_deep_json_surveys_the_deepspeed_ops() -> None:
    """``--deep`` imports torch and DeepSpeed (in the doctor's own process and its op-check
    child, never the console's): the report carries their answers."""
    done = run([sys.executable, "-m", "engine", "doctor", "--deep", "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] in ("healthy", "degraded")
    # --deep also asks DeepSpeed which ops can be JIT-built here (as ds_report), in a child
    assert "cpu_adam" in report["software"]["deepspeed_compatible"], report["software"]["unavailable"]
    assert report["software"]["deepspeed_ops_required"] == []  # torch's own AdamW: no op needed


@pytest.mark.deepspeed
def test_memtui_doctor_deep_text_lists_the_ops() -> None:
    done = run([*memtui_command(), "doctor", "--deep"])
    assert done.returncode == 0, done.stderr
    assert "deepspeed ops: pre-built" in done.stdout and "needed by the run: none" in done.stdout
    # the same disks as the quick doctor: the home, and runs/ where checkpoints will go
    assert "disk run (/tmp/mt" in done.stdout and "disk checkpoints (/tmp/mt" in done.stdout
    assert "/runs)" in done.stdout
