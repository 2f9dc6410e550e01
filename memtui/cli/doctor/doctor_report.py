"""``memtui doctor [--json] [--deep]``: the environment doctor's verdict before any run.

The default runs ``engine.doctor.examiner`` in this process: it is torch-free (torch's and
DeepSpeed's build facts are read from their files) and answers at once. ``--deep`` also
asks torch whether CUDA works and DeepSpeed which of its ops can be JIT-built here (what
``ds_report`` calls "compatible"), which imports both, so it runs ``python -m engine doctor
--deep`` in a child process (which surveys the ops in a child of its own, bounded by
``engine.doctor.deepspeed_ops.SURVEY_TIMEOUT_S``): the console never loads torch. The op check
belongs to ``--deep`` rather than a flag of its own: it costs the same wait (importing torch
and DeepSpeed), and one flag for "the slow, thorough look" is easier to remember.
Exit 0 unless the verdict is unhealthy (1).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.hardware_report import DoctorReport
    from engine.run.directory import RunDir

DEEP_TIMEOUT_S = 120.0
"""Seconds for the child doctor (importing torch and DeepSpeed can take tens of seconds)."""


def doctor_exit_code(verdict: str) -> int:
    """0 for healthy or degraded (a CPU-only machine trains), 1 for unhealthy."""
    return 1 if verdict == "unhealthy" else 0


def run_doctor(
    *,
    as_json: bool,
    deep: bool,
    run: RunDir | None = None,
    rdzv_endpoint: str | None = None,
) -> int:
    """Print the report; the exit status follows the verdict. ``run``: its store, checkpoints
    and supervisor are judged too (``engine.doctor.run_findings``), its disk is the one checked."""
    from engine.run.directory import memtui_home, runs_root

    run_dir = run.path if run is not None else None
    home = run_dir or memtui_home()
    # Before any run, a run's checkpoints/ will be under runs/ (its disk is the nearest existing parent's).
    checkpoints = run_dir / "checkpoints" if run_dir else runs_root(home)
    if deep:
        return _run_child(
            as_json=as_json, run_dir=home, checkpoint_dir=checkpoints, rdzv_endpoint=rdzv_endpoint, run=run
        )
    from engine.doctor.examiner import EnvironmentDoctor
    from engine.doctor.report_text import render_report

    doctor = EnvironmentDoctor(
        run_dir=home, checkpoint_dir=checkpoints, interconnect=True, rdzv_endpoint=rdzv_endpoint
    )
    report = with_run(doctor.examine(), run)
    print(report.model_dump_json(indent=2) if as_json else render_report(report))
    return doctor_exit_code(report.verdict)


def with_run(report: DoctorReport, run: RunDir | None) -> DoctorReport:
    """``report`` with ``run``'s findings among its own, worst first, and the verdict again."""
    if run is None:
        return report
    from engine.doctor.findings import severity_order, verdict_of
    from engine.doctor.gpu_fit import fit_findings
    from engine.doctor.run_findings import run_findings

    found = run_findings(run)
    with contextlib.suppress(Exception):  # an unreadable run.json is the store finding's to say
        found += fit_findings(run.read_config(), report.hardware.gpus)
    findings = sorted([*report.findings, *found], key=severity_order)
    return report.model_copy(update={"findings": findings, "verdict": verdict_of(findings)})


def _run_child(
    *, as_json: bool, run_dir: Path, checkpoint_dir: Path, rdzv_endpoint: str | None, run: RunDir | None
) -> int:
    command = [sys.executable, "-m", "engine", "doctor", "--deep", "--json"]
    command += ["--run-dir", str(run_dir), "--checkpoint-dir", str(checkpoint_dir)]
    command += ["--rdzv-endpoint", rdzv_endpoint] if rdzv_endpoint else []
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DEEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"memtui: the deep doctor did not answer within {DEEP_TIMEOUT_S:g} s", file=sys.stderr)
        return 1
    try:
        raw = json.loads(done.stdout)
    except json.JSONDecodeError:
        sys.stderr.write(done.stderr)
        print("memtui: the deep doctor printed no report", file=sys.stderr)
        return 1
    from engine.doctor.report_text import render_report
    from engine.hardware_report import DoctorReport

    report = with_run(DoctorReport.model_validate(raw), run)
    print(report.model_dump_json(indent=2) if as_json else render_report(report))
    return doctor_exit_code(report.verdict)
