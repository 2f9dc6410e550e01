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

from gpu_check_stages import STAGES  # noqa: E402

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


def test_cpu_mode_runs_every_stage_and_writes_one_summary(tmp_path: Path) -> None:
    done, summary = check(tmp_path, "--cpu", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert summary["mode"] == "cpu" and summary["ok"] and summary["first_failure"] is None
    stages = {s["name"]: s for s in summary["stages"]}
    assert list(stages) == list(STAGES)
    skipped = {name for name, stage in stages.items() if stage["status"] == "skipped"}
    # no wheelhouse here (the venv's packages); --quick runs each preset and precision once,
    # and on the CPU the OOM at ZeRO 0, 2 and 3
    assert skipped == {"wheels", "run-tiny-fp16", "run-small-bf16", "oom-zero1"}
    for stage in stages.values():
        assert set(stage) == {"name", "status", "reason", "duration_s", "figures"}
        assert isinstance(stage["duration_s"], float)
        assert stage["status"] == "ok" or stage["name"] in skipped, stage
    for name in ("run-tiny-bf16", "run-small-fp16"):
        assert stages[name]["figures"]["state"] == "completed"
        assert stages[name]["figures"]["memory"]["mem_kind"] == "cpu-rss"
    assert stages["oom-zero0"]["figures"]["oom"]["ooms"] >= 1  # a real OOM, recovered
    assert stages["oom-zero0"]["figures"]["predict"]["peak_ratio"] is not None
    assert stages["oom-zero3"]["figures"]["zero_stage"] == 3
    assert stages["oom-zero2"]["figures"]["overlap_comm"] is True
    assert stages["oom-forensics"]["figures"]["listed"][0]["snapshot_file"] is None  # no history on the CPU
    assert stages["overhead"]["figures"]["ratio_wall"] > 0
    assert stages["console"]["figures"]["connection"] == "connected"
    assert (tmp_path / "console.svg").read_text().lstrip().startswith("<svg")
    assert "== console: ok" in (tmp_path / "gpu_check.log").read_text()


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
