"""``memtui oom``: the OOMs a run recorded in its ``oom/`` directory, offline."""

from __future__ import annotations

import json

import pytest

from engine.run.directory import RunDir
from engine.run.oom_files import OomBreakdown, oom_dir, oom_stem, write_breakdown
from memtui.cli.main import main

GIB = 1 << 30


def recorded(run: RunDir, step: int, attempt: int, snapshot: bool) -> None:
    stem = oom_stem(step, attempt, 16, 0, 1)
    name = f"{stem}.pickle" if snapshot else None
    if name:
        (oom_dir(run.path) / name).parent.mkdir(parents=True, exist_ok=True)
        (oom_dir(run.path) / name).write_bytes(b"snapshot")
    breakdown = OomBreakdown(
        step=step, attempt=attempt, at=1.0, error="OutOfMemoryError: CUDA out of memory", outcome="redone",
        micro_batch_before=16, micro_batch_after=8, mem_kind="cuda", budget=80 * GIB, baseline=9 * GIB,
        step_peak=79 * GIB, snapshot=name,
    )  # fmt: skip
    write_breakdown(oom_dir(run.path), stem, breakdown)


def test_lists_each_oom_with_its_files_and_the_command_to_open_the_snapshot(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded(run_dir, 40, 1, snapshot=False)
    recorded(run_dir, 120, 2, snapshot=True)
    assert main(["oom", str(run_dir.path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["STEP", "ATTEMPT", "RANK", "MICRO-BATCH", "OUTCOME"]
    assert lines[1].split()[:6] == ["40", "1", "0", "16", "→", "8"]
    assert "step-00000040-attempt-1-mb-16.json" in lines[1] and lines[1].rstrip().endswith("-")  # no snapshot
    assert "step-00000120-attempt-2-mb-16.pickle" in lines[2]
    snapshot = oom_dir(run_dir.path) / "step-00000120-attempt-2-mb-16.pickle"
    assert f"python -m torch.cuda._memory_viz trace_plot {snapshot} -o {snapshot}.html" in out
    assert "https://pytorch.org/memory_viz" in out


def test_json_lists_every_field_and_a_pruned_snapshot_as_none(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded(run_dir, 7, 1, snapshot=True)
    (oom_dir(run_dir.path) / "step-00000007-attempt-1-mb-16.pickle").unlink()  # pruned since
    assert main(["oom", str(run_dir.path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["step"], row["attempt"], row["micro_batch_before"], row["micro_batch_after"]) == (7, 1, 16, 8)
    assert row["snapshot_file"] is None and row["open_command"] is None
    assert row["breakdown_file"].endswith("oom/step-00000007-attempt-1-mb-16.json")
    assert row["breakdown"]["step_peak"] == 79 * GIB


def test_a_run_without_an_oom_says_so(run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["oom", str(run_dir.path)]) == 0
    assert "no out-of-memory error recorded" in capsys.readouterr().err
    assert main(["oom", str(run_dir.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
