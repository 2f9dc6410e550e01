"""``memtui pause`` / ``unpause`` against the fake engine: the Pause sent, the line or JSON
printed, and one line with exit 1 when the supervisor refuses or the run is not live."""

from __future__ import annotations

import json

import pytest

from engine.protocol import Pause
from engine.run.directory import RunDir
from memtui.cli.main import main
from tests.fakes.fake_engine import FakeEngine
from tests.waiting import wait_for


def test_pause_then_unpause(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id) as fake:
        assert main(["pause"]) == 0  # default: the newest live run
        sent = fake.requests[-1]
        assert isinstance(sent, Pause) and sent.paused is True and sent.reason == "memtui pause"
        out = capsys.readouterr().out
        assert out == (
            f"{live_run.run_id}: pausing (now running); the trainer holds at the next step boundary\n"
        )
        wait_for(lambda: fake.state == "paused")
        assert [e.type for e in fake.events[-3:]] == ["pause_requested", "run_paused", "state_changed"]

        assert main(["pause", live_run.run_id]) == 0  # already paused: says so
        assert capsys.readouterr().out == f"{live_run.run_id}: paused\n"

        assert main(["unpause", live_run.run_id, "--json"]) == 0
        sent = fake.requests[-1]
        assert isinstance(sent, Pause) and sent.paused is False and sent.reason == "memtui unpause"
        assert json.loads(capsys.readouterr().out) == {"state": "paused", "paused": False}
        wait_for(lambda: fake.state == "running")
        assert [e.type for e in fake.events[-3:]] == ["continue_requested", "run_continued", "state_changed"]
    assert [m.kind for m in fake.requests] == ["pause", "pause", "pause"]


def test_pause_json_prints_the_answer(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id):
        assert main(["pause", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"state": "running", "paused": True}


@pytest.mark.parametrize("command", ["pause", "unpause"])
def test_a_refusal_is_one_line_and_exit_1(
    live_run: RunDir, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id, state="stopped") as fake:
        assert main([command, "--json"]) == 1
        assert [m.kind for m in fake.requests] == ["pause"]
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"memtui: {live_run.run_id}: the supervisor refused to {command}: ")
    assert "the run is stopped" in captured.err


def test_a_run_without_a_supervisor_is_refused(run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pause", run_dir.run_id]) == 1
    err = capsys.readouterr().err
    assert err == f"memtui: {run_dir.run_id}: not running (no supervisor to pause it)\n"


@pytest.mark.parametrize(("command", "says"), [("pause", "next optimizer-step"), ("unpause", "go on")])
def test_help_says_what_it_does(command: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: memtui {command} [-h] [--json] [RUN]" in out and says in out
