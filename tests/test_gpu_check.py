"""The one-call GPU check (``bench/gpu_check.sh``) in its CPU mode, so that it cannot rot
between the sessions that are lent a GPU: every stage runs for real on the CPU and the summary
is one well-formed JSON document naming each stage's status, seconds and figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_harness import CHECKOUT

BENCH = Path(CHECKOUT) / "bench"
sys.path.insert(0, str(BENCH))

from gpu_check_stages import QUICK_PLAN, STAGES  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.deepspeed, pytest.mark.timeout(480)]


def check(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``bash bench/gpu_check.sh ARGS --out out`` with this interpreter; (result, summary)."""
    # no wheelhouse: a checkout that built one (for the GPU host's Python) keeps it out of here
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "WHEELHOUSE": str(out / "none")}
    done = subprocess.run(
        ["bash", str(BENCH / "gpu_check.sh"), *args, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=460,
    )
    return done, json.loads((out / "gpu_check.json").read_text())


def test_the_quick_plan_fits_one_device_call_most_important_first() -> None:
    assert set(QUICK_PLAN) <= set(STAGES)
    assert list(QUICK_PLAN)[:3] == ["wheels", "environment", "doctor"]  # nothing runs without them
    assert sum(QUICK_PLAN.values()) <= 450 - 20  # the default deadline, less its margins
    assert all(cap > 0 for cap in QUICK_PLAN.values())


def test_cpu_quick_runs_the_quick_plan_under_its_caps_and_writes_one_summary(tmp_path: Path) -> None:
    done, summary = check(tmp_path, "--cpu", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert summary["mode"] == "cpu" and summary["ok"] and summary["first_failure"] is None
    stages = {s["name"]: s for s in summary["stages"]}
    assert list(stages) == list(QUICK_PLAN)  # in the plan's order
    skipped = {name for name, stage in stages.items() if stage["status"] == "skipped"}
    assert skipped == {"wheels"}  # no wheelhouse here (the venv's packages)
    for stage in stages.values():
        assert set(stage) == {"name", "status", "reason", "duration_s", "figures"}
        assert isinstance(stage["duration_s"], float)
        assert stage["status"] == "ok" or stage["name"] in skipped, stage
        assert stage["duration_s"] <= QUICK_PLAN[stage["name"]] + 5  # its cap held
    for name in ("run-tiny-bf16", "run-small-fp16"):
        assert stages[name]["figures"]["state"] == "completed"
        assert stages[name]["figures"]["memory"]["mem_kind"] == "cpu-rss"
    assert stages["oom-zero0"]["figures"]["oom"]["ooms"] >= 1  # a real OOM, recovered
    assert stages["oom-zero0"]["figures"]["predict"]["peak_ratio"] is not None
    assert stages["oom-zero3"]["figures"]["zero_stage"] == 3
    assert stages["console"]["figures"]["connection"] == "connected"
    assert (tmp_path / "console.svg").read_text().lstrip().startswith("<svg")
    log = (tmp_path / "gpu_check.log").read_text()
    assert "== console: ok" in log and "quick plan: wheels 50 s, environment 40 s" in log


def test_the_full_checks_other_stages_run_on_the_cpu_too(tmp_path: Path) -> None:
    """The second call's stages unlike the first's (the other preset runs and ZeRO 1's OOM
    are the same code as theirs at other settings, ~20 s each here)."""
    others = ["oom-zero2", "overhead", "oom-forensics"]
    assert not set(others) & set(QUICK_PLAN)
    done, summary = check(tmp_path, "--cpu", "--quick", "--only", ",".join(others))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stages = {s["name"]: s for s in summary["stages"]}
    assert list(stages) == ["wheels", *others]
    assert stages["oom-zero2"]["figures"]["overlap_comm"] is True
    assert stages["oom-forensics"]["figures"]["listed"][0]["snapshot_file"] is None  # no history on the CPU
    assert stages["overhead"]["figures"]["ratio_wall"] > 0
    assert all(stages[name]["status"] == "ok" for name in others)


def test_a_missing_wheelhouse_fails_first_and_stops_the_check(tmp_path: Path) -> None:
    done, summary = check(tmp_path, "--only", "environment", "--wheelhouse", str(tmp_path / "none"))
    assert done.returncode == 1
    assert summary["first_failure"].startswith("wheels: no wheels in")
    assert "FAILED: wheels: no wheels in" in done.stderr
    assert [s["name"] for s in summary["stages"]] == ["wheels"]  # nothing runs after it


def test_on_a_host_without_cuda_the_environment_stage_says_so(tmp_path: Path) -> None:
    done, summary = check(tmp_path, "--only", "environment")
    assert done.returncode == 1
    assert summary["first_failure"].startswith("environment: no CUDA device here")
    stages = {s["name"]: s for s in summary["stages"]}
    assert list(stages) == ["wheels", "environment"]
    assert stages["environment"]["figures"]["cuda"] is False
