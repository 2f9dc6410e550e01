"""``memtui run`` and bare ``memtui``: the flow around the launcher (stubbed: no real supervisor)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import engine.run.launch
import memtui.cli.runs.lifecycle_commands
from engine.run.directory import RunDir, list_runs
from memtui.cli.main import main


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stub spawn/wait: 'start' a supervisor by writing our own pid; record what was started."""
    started: list[str] = []

    def spawn(run: RunDir, *, extra_env: dict[str, str] | None = None) -> int:
        run.pid_file.write_text(str(os.getpid()))
        started.append(run.run_id)
        return os.getpid()

    monkeypatch.setattr(engine.run.launch, "spawn_supervisor", spawn)
    monkeypatch.setattr(engine.run.launch, "wait_until_serving", lambda run, pid, timeout=30.0: None)
    return started


@pytest.fixture
def consoles(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    opened: list[tuple[str, str | None]] = []

    def open_console(run: RunDir, theme: str | None, *, readonly: bool = False, bell: bool = False) -> int:
        opened.append((run.run_id, theme))
        return 0

    monkeypatch.setattr(memtui.cli.runs.lifecycle_commands, "open_console", open_console)
    return opened


def test_run_detach_prints_the_run(home: Path, launcher: list[str], consoles: list, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["run", "--preset", "tiny", "--steps", "40", "--name", "exp1", "--detach"]) == 0
    (run,) = list_runs(home)
    assert launcher == [run.run_id] and run.run_id.startswith("exp1-")
    assert run.read_config().steps == 40
    out = capsys.readouterr().out
    assert run.run_id in out and str(run.path) in out
    assert consoles == []


def test_run_json_then_attach_with_theme(home: Path, launcher: list[str], consoles: list, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["--theme", "light", "run", "--json"]) == 0  # before or after the command
    started = json.loads(capsys.readouterr().out)
    assert started["run_id"] == launcher[0] and started["supervisor_pid"] == os.getpid()
    assert consoles == [(launcher[0], "light")]


def test_run_that_does_not_come_up(home: Path, launcher: list[str], monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    def dies(run: RunDir, pid: int, timeout: float = 30.0) -> None:
        raise engine.run.launch.LaunchError(
            "supervisor (pid 1) exited before serving\n--- log tail ---\nboom"
        )

    monkeypatch.setattr(engine.run.launch, "wait_until_serving", dies)
    assert main(["run", "--detach"]) == 1
    assert "the run did not start" in capsys.readouterr().err


def test_bare_memtui_starts_the_demo_then_attaches_to_the_live_run(
    home: Path, launcher: list[str], consoles: list
) -> None:  # type: ignore[no-untyped-def]
    assert main([]) == 0
    assert len(launcher) == 1 and launcher[0].startswith("demo-")
    assert RunDir(home / "runs" / launcher[0]).read_config().preset == "tiny"
    assert main(["--theme", "ansi"]) == 0  # now one is live: attach, start nothing
    assert len(launcher) == 1
    assert consoles == [(launcher[0], None), (launcher[0], "ansi")]


def _ended_run(home: Path) -> RunDir:
    from engine.config.config_file import build_run_config
    from tests.memtui.test_cli_runs import fabricate_store

    run = RunDir.create(build_run_config(name="done", steps=10), home)
    fabricate_store(run, "completed", steps=10)
    return run


def test_bare_memtui_on_a_terminal_offers_the_ended_newest_run(
    home: Path, launcher: list[str], consoles: list, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    ended = _ended_run(home)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    answers = iter(["", "n"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert main([]) == 0  # Enter: show it, start nothing
    assert launcher == [] and consoles == [(ended.run_id, None)]
    assert f"the newest run, {ended.run_id}, has ended: completed at step 10/10" in capsys.readouterr().err
    assert main([]) == 0  # n: a new demo
    assert len(launcher) == 1 and consoles[-1] == (launcher[0], None)


def test_bare_memtui_without_a_terminal_says_it_starts_a_demo_instead(
    home: Path, launcher: list[str], consoles: list, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    ended = _ended_run(home)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main([]) == 0
    err = capsys.readouterr().err
    assert f"starting a new demo run (memtui attach {ended.run_id} shows the ended one)" in err
    assert len(launcher) == 1 and consoles == [(launcher[0], None)]


def test_leaving_a_live_run_says_how_to_come_back(home: Path, launcher: list[str]) -> None:  # type: ignore[no-untyped-def]
    from engine.config.config_file import build_run_config
    from engine.run.storage.store import Store
    from memtui.cli.runs.lifecycle_commands import detach_note, start_run

    run = start_run(build_run_config(preset="tiny"))  # its supervisor: this process (stubbed)
    note = detach_note(run)
    assert note == f"detached from {run.run_id}; it goes on — memtui attach {run.run_id} to come back"
    with Store(run.store) as store:
        store.update_meta(state="stopping")
    assert detach_note(run) == ""  # not going on
    with Store(run.store) as store:
        store.update_meta(state="running")
    assert detach_note(run) != ""
    run.pid_file.unlink()
    assert detach_note(run) == ""  # its supervisor is gone: interrupted
