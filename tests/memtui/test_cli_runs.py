"""ls / status / logs / stop on fabricated runs: offline (a store, no supervisor) and live
(a scripted transport)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import memtui.cli.runs.lifecycle_commands
from engine.config.config_file import build_run_config
from engine.domain import RunStatus
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import ClientMessage, ServerMessage
from memtui.cli.main import main
from tests.fakes.run_script import make_sample
from tests.fakes.scripted_engine import ScriptedEngine, answer_ok, welcome_for


def fabricate_store(run: RunDir, state: str, steps: int = 5, **meta: object) -> None:
    with Store(run.store) as store:
        for step in range(1, steps + 1):
            store.add_step(make_sample(step))
        store.append_event("run_started", message="started")
        store.update_meta(state=state, started_at=1_700_000_000.0, attempt=1, restarts=0, **meta)


def test_ls_and_status_json_on_offline_runs(
    home: Path, run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    fabricate_store(run_dir, "completed")
    crashed = RunDir.create(build_run_config(name="crash", steps=50), home)
    fabricate_store(crashed, "running", steps=3)  # never ended and no supervisor: interrupted

    assert main(["ls", "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[run_dir.run_id]["state"] == "completed"
    assert listed[crashed.run_id]["state"] == "interrupted"
    assert listed[run_dir.run_id]["step"] == 5 and listed[run_dir.run_id]["target_steps"] == 100
    assert listed[crashed.run_id]["age_s"] >= 0

    assert main(["status", run_dir.run_id, "--json"]) == 0
    status = RunStatus.model_validate_json(capsys.readouterr().out)
    assert (status.state, status.step, status.mem_kind, status.micro_batch) == ("completed", 5, "cpu-rss", 8)
    assert status.loss == pytest.approx(5.45)


def test_human_forms(home: Path, run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    fabricate_store(run_dir, "stopped")
    assert main(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["RUN", "STATE", "STEP", "LOSS", "AGE"]
    assert out[1].split()[:3] == [run_dir.run_id, "stopped", "5/100"]
    assert main(["status"]) == 0  # default: the newest run
    text = capsys.readouterr().out
    assert "stopped" in text and "300 MiB allocated" in text and "CPU stand-in" in text


def test_run_resolution_errors_name_the_choices(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == 1
    assert "no runs in" in capsys.readouterr().err
    a = RunDir.create(build_run_config(name="alpha", steps=10), home)
    RunDir.create(build_run_config(name="alpine", steps=10), home)
    assert main(["status", "al", "--json"]) == 2
    err = capsys.readouterr().err
    assert "matches 2 runs" in err and a.run_id in err
    assert main(["status", "zzz"]) == 2
    assert "no run matches 'zzz'" in capsys.readouterr().err
    assert main(["status", "alph", "--json"]) == 0  # a unique prefix
    assert json.loads(capsys.readouterr().out)["run_id"] == a.run_id
    assert main(["status", str(a.path), "--json"]) == 0  # a path
    assert main(["attach"]) == 1
    assert "no live run" in capsys.readouterr().err


def test_status_asks_the_live_supervisor(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    status = RunStatus(
        run_id=live_run.run_id, name="demo", state="running", run_dir=str(live_run.path), step=77
    )
    with ScriptedEngine.in_thread(live_run.socket, welcome_for(live_run.run_id), status=status) as fake:
        assert main(["status", "--json"]) == 0
        assert [m.kind for m in fake.requests] == ["status"]
    assert json.loads(capsys.readouterr().out)["step"] == 77


def test_stop_waits_for_the_ending(
    live_run: RunDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fabricate_store(live_run, "running")
    monkeypatch.setattr(memtui.cli.runs.lifecycle_commands, "STOP_POLL_S", 0.02)

    def supervisor_exits(message: ClientMessage) -> list[ServerMessage]:
        """What a real supervisor does once it has stopped: its store says so, its pid file goes."""
        if message.kind == "stop":
            with Store(live_run.store) as store:
                store.update_meta(state="stopped")
            live_run.pid_file.unlink()
        return answer_ok(message)

    welcome = welcome_for(live_run.run_id)
    with ScriptedEngine.in_thread(live_run.socket, welcome, reply=supervisor_exits) as fake:
        assert main(["stop"]) == 0
        assert fake.requests[0].kind == "stop"
    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"{live_run.run_id}: stopped at step 5",
        "  no checkpoint: a resume starts at step 0",
    ]


def test_stop_times_out_with_a_clear_message(
    live_run: RunDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(memtui.cli.runs.lifecycle_commands, "STOP_POLL_S", 0.02)
    status = RunStatus(run_id=live_run.run_id, name="demo", state="stopping", run_dir=str(live_run.path))
    with ScriptedEngine.in_thread(live_run.socket, welcome_for(live_run.run_id), status=status):  # stays so
        assert main(["stop", "--timeout", "0.3"]) == 1
    assert "still stopping after 0.3 s" in capsys.readouterr().err


def test_stop_on_an_ended_run_reports_it(run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    fabricate_store(run_dir, "completed")
    assert main(["stop", run_dir.run_id]) == 0
    assert "was already completed" in capsys.readouterr().out


def test_logs_tail_and_choice(run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir.supervisor_log.write_text("".join(f"sup {i}\n" for i in range(10)))
    assert main(["logs", "-n", "2"]) == 0  # no trainer log yet: the supervisor's lines, marked
    assert capsys.readouterr().out.splitlines() == ["supervisor | sup 8", "supervisor | sup 9"]
    run_dir.trainer_log(1).write_text("t1\n")
    run_dir.trainer_log(2).write_text("a\nb\nc\n")
    assert main(["logs", run_dir.run_id, "--trainer", "-n", "2"]) == 0  # the newest attempt's, as it is
    assert capsys.readouterr().out.splitlines() == ["b", "c"]
    assert main(["logs", "--supervisor", "-n", "1", "-f"]) == 0  # no supervisor: follow ends at once
    assert capsys.readouterr().out.splitlines() == ["sup 9"]
    os.remove(run_dir.supervisor_log)
    assert main(["logs", "--supervisor"]) == 1
    assert "No such file" in capsys.readouterr().err


def test_logs_name_the_hang_diagnosis_files(run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir.supervisor_log.write_text("sup\n")
    assert main(["logs"]) == 0 and "stacks" not in capsys.readouterr().err  # none yet: nothing said
    kept = ["stacks/20261202T041000Z-rank0.txt", "stacks/20261202T041000Z-rank1.txt"]
    kept.append("flight/nccl-trace-rank-1")
    for name in kept:
        (run_dir.path / name).parent.mkdir(exist_ok=True)
        (run_dir.path / name).write_text("dump")
    assert main(["logs"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["supervisor | sup"]  # the logs alone on stdout
    assert err.splitlines()[1:] == [f"  {name}" for name in kept]


def test_without_a_run_the_newest_live_run_is_meant(
    home: Path, live_run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.run.directory import list_runs
    from memtui.cli.resolver import resolve_run

    # An older run still going and a newer one that has finished.
    newer = RunDir.create(build_run_config(name="done", steps=10), home)
    fabricate_store(newer, "completed")
    assert [r.run_id for r in list_runs(home)] == [newer.run_id, live_run.run_id]
    live_run.supervisor_log.write_text("live\n")
    newer.supervisor_log.write_text("finished\n")

    assert main(["logs", "--supervisor"]) == 0
    assert capsys.readouterr().out.splitlines() == ["live"]
    assert resolve_run(None, live=False, prefer_live=True).run_id == live_run.run_id  # status, export
    assert resolve_run(None, live=False).run_id == newer.run_id  # resume: the newest of all

    live_run.pid_file.unlink()  # no live run left: the newest run of all
    assert main(["logs", "--supervisor"]) == 0
    assert capsys.readouterr().out.splitlines() == ["finished"]


@pytest.mark.slow
def test_status_names_why_a_run_with_an_unusable_run_json_failed(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real supervisor refuses to run on a run.json that does not validate, says why in
    the store, and ``memtui status`` shows it."""
    doc = json.loads(run_dir.config_file.read_text())
    doc["config"]["steps"] = "lots"
    run_dir.config_file.write_text(json.dumps(doc))
    done = subprocess.run(
        [sys.executable, "-m", "engine", "supervise", str(run_dir.path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "run config unusable" in done.stdout and "steps" in done.stdout  # supervisor.log
    assert main(["status", run_dir.run_id]) == 0
    out = capsys.readouterr().out
    assert "failed" in out and "run config unusable" in out and "steps:" in out
