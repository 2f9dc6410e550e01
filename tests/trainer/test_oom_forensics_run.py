"""An OOM in the real trainer (DeepSpeed on the CPU, the oom chaos kind's start-time hook)
leaves its memory breakdown in the run's directory, and ``memtui oom`` lists it."""

from __future__ import annotations

import json

import pytest
from test_oom_recovery import attempt, config, injected
from trainer_harness import make_run

from memtui.cli.main import main

pytestmark = pytest.mark.deepspeed


def test_an_oom_leaves_a_breakdown_that_memtui_oom_lists(capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(config(0, steps=5))
    with injected("2:1:backward"):  # step 2 (0-based): redone as step 3 at micro-batch 2
        _, code, output = attempt(run)
    assert code == 0, output

    assert main(["oom", str(run.path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["step"], row["attempt"], row["outcome"]) == (3, 1, "redone")
    assert (row["micro_batch_before"], row["micro_batch_after"]) == (4, 2)
    assert row["breakdown_file"] == str(run.path / "oom" / "step-00000003-attempt-1-mb-4.json")
    assert row["snapshot_file"] is None  # no allocator history on the CPU
    breakdown = row["breakdown"]
    assert breakdown["mem_kind"] == "cpu-rss" and "MemoryError" in breakdown["error"]
    assert breakdown["step_peak"] > 0 and breakdown["baseline"] > 0 and breakdown["budget"] > 0
    assert breakdown["planned"]["params"] > 0  # the built-in model's shape is known: the plan's parts
    assert breakdown["planned_activations"] == breakdown["planned"]["activations_per_sample"] * 4

    assert main(["oom", str(run.path)]) == 0
    assert "step-00000003-attempt-1-mb-4.json" in capsys.readouterr().out
