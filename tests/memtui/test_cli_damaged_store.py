"""A damaged store is a state, not a crash: every command that opens it says so in one line
and exits 2; ``resume`` starts no supervisor over it, and none over a store that lost its
history while the run's checkpoints remain (it would have begun an empty history)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.checkpoints.store import CheckpointStore
from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.cli.main import main
from tests.engine.checkpoint_samples import FIELDS, writer


def stored_run(home: Path) -> RunDir:
    run = RunDir.create(build_run_config(name="dmg", steps=100), home)
    with Store(run.store) as store:
        for index in range(60):
            store.append_event("note", message=f"event {index} " + "x" * 300)
    return run


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def zero(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for offset in range(0, 100):  # the header: magic string, page size, formats
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [truncate, zero, flip])
@pytest.mark.parametrize("command", ["export", "directives", "report", "resume", "status"])
def test_a_damaged_store_is_one_line_and_exit_2(
    damage, command: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = stored_run(home)
    damage(run.store)
    before = run.store.read_bytes()
    assert main([command, run.run_id]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memtui: "), err  # was a sqlite3 traceback
    assert run.store.read_bytes() == before and run.supervisor_pid() is None  # nothing started or written
    assert "memtui checkpoints" in err  # what still can be done


def test_status_json_of_a_damaged_store_is_exit_2_and_no_document(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = stored_run(home)
    truncate(run.store)
    assert main(["status", run.run_id, "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "damaged, not a store that can be read" in err, err


def test_ls_lists_a_run_whose_store_is_damaged_beside_the_others(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged, intact = stored_run(home), stored_run(home)
    zero(damaged.store)
    assert main(["ls"]) == 0
    out = capsys.readouterr().out
    assert damaged.run_id in out and intact.run_id in out


def test_resume_refuses_to_start_an_empty_history_over_checkpoints(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = stored_run(home)
    checkpoints = CheckpointStore(run.checkpoints)
    for step in (10, 20, 30):
        assert checkpoints.save(step, writer(run.checkpoints, step), FIELDS, 4096).status == "saved"
    run.store.write_bytes(b"")  # `: > telemetry.sqlite`: a store with nothing in it
    assert main(["resume", run.run_id]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no step, yet 3 checkpoint(s) were committed" in err, err
    assert "move telemetry.sqlite aside first" in err and run.supervisor_pid() is None
    assert run.store.read_bytes() == b""


def test_doctor_run_checks_the_store_and_the_checkpoints(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = stored_run(home)
    checkpoints = CheckpointStore(run.checkpoints)
    for step in (10, 20):
        assert checkpoints.save(step, writer(run.checkpoints, step), FIELDS, 4096).status == "saved"
    assert main(["doctor", run.run_id, "--json"]) in (0, 1)  # the machine's own verdict
    findings = [f["message"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert f"{run.run_id}: store ok (quick_check), 0 steps stored" in findings
    assert (
        f"{run.run_id}: 2 checkpoint(s) verify (quick check); a resume starts from global_step20 (step 20)"
        in findings
    )
    assert f"{run.run_id}: no supervisor serves it" in findings

    truncate(run.store)
    before = run.store.read_bytes()
    assert main(["doctor", run.run_id, "--json"]) == 1  # unhealthy, whatever the machine
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "unhealthy"
    worst = report["findings"][0]
    assert (
        worst["level"] == "unhealthy"
        and "damaged" in worst["message"]
        and "memtui checkpoints" in worst["message"]
    )
    assert run.store.read_bytes() == before  # the doctor only reads
