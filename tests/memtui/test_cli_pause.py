"""``memtui pause`` / ``unpause`` against the real supervisor (what a pause does) and a
scripted transport (what is sent): the Pause sent, the line or JSON
printed, and one line with exit 1 when the supervisor refuses or the run is not live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import ClientMessage, Error, Ok, Pause, ServerMessage
from memtui.cli.main import main
from tests.fakes.scripted_engine import ScriptedEngine, welcome_for
from tests.live_supervisor import live_env, live_in_thread
from tests.waiting import wait_for


def event_types(run: RunDir) -> list[str]:
    with Store(run.store, readonly=True) as store:
        return [e.type for e in store.events_since(0)]


@pytest.mark.slow
def test_pause_then_unpause(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    live_env(monkeypatch)
    with live_in_thread(home) as live:
        run = live.run
        assert main(["pause"]) == 0  # default: the newest live run
        out = capsys.readouterr().out
        assert out == f"{run.run_id}: pausing (now running); the trainer holds at the next step boundary\n"
        wait_for(lambda: live.supervisor.state == "paused", what="the trainer holding")
        assert {"pause_requested", "run_paused"} <= set(event_types(run))

        assert main(["pause", run.run_id]) == 0  # already paused: says so
        assert capsys.readouterr().out == f"{run.run_id}: paused\n"

        assert main(["unpause", run.run_id, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"state": "paused", "paused": False}
        wait_for(lambda: live.supervisor.state == "running", what="the trainer going on")
        assert {"continue_requested", "run_continued"} <= set(event_types(run))


def test_pause_sends_pause_and_json_prints_the_answer(
    live_run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    def answer(message: ClientMessage) -> list[ServerMessage]:
        assert isinstance(message, Pause)
        return [Ok(id=message.id, result={"state": "running", "paused": message.paused})]

    with ScriptedEngine.in_thread(live_run.socket, welcome_for(live_run.run_id), reply=answer) as fake:
        assert main(["pause", "--json"]) == 0
        sent = fake.requests[-1]
        assert isinstance(sent, Pause) and sent.paused is True and sent.reason == "memtui pause"
        assert json.loads(capsys.readouterr().out) == {"state": "running", "paused": True}
        assert main(["unpause", "--json"]) == 0
        sent = fake.requests[-1]
        assert isinstance(sent, Pause) and sent.paused is False and sent.reason == "memtui unpause"
    assert [m.kind for m in fake.requests] == ["pause", "pause"]


@pytest.mark.parametrize("command", ["pause", "unpause"])
def test_a_refusal_is_one_line_and_exit_1(
    live_run: RunDir, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    def refused(message: ClientMessage) -> list[ServerMessage]:
        reason = "the run is stopped: there is no training to pause"
        assert isinstance(message, Pause)
        return [Error(id=message.id, reason=reason)]

    welcome = welcome_for(live_run.run_id, "stopped")
    with ScriptedEngine.in_thread(live_run.socket, welcome, reply=refused) as fake:
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
