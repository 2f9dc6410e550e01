"""Every ``--json`` of the CLI prints exactly one JSON document, an empty list when there is
nothing, and a list of tens of thousands of verdicts is streamed rather than built."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import engine.run.launch
from engine.config.config_file import build_run_config
from engine.domain import DecisionRecord, RunStatus
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.cli.json_document import stream_json_array
from memtui.cli.main import main
from tests.fakes.run_script import make_sample
from tests.live_supervisor import live_env, live_in_thread


def json_commands() -> set[str]:
    """Every subcommand that has a ``--json`` flag, found by introspection."""
    from memtui.cli.parser import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        name
        for name, parser in commands.choices.items()
        if any("--json" in action.option_strings for action in parser._actions)
    }


def stopped_run(home: Path, name: str = "demo") -> RunDir:
    run = RunDir.create(build_run_config(name=name, steps=100), home)
    with Store(run.store) as store:
        store.add_step(make_sample(1))
        store.update_meta(state="stopped", attempt=1)
    return run


def with_decisions(run: RunDir, count: int) -> None:
    with Store(run.store) as store:
        for i in range(count):
            store.add_decision(
                DecisionRecord(
                    ts=float(i),
                    decision_id=f"p-{i}",
                    directive_id=f"d-{i % 7}",
                    source="flood",
                    verdict="reject",
                    state="rejected",
                    reasons=["rate limit"],
                    rate_limited=True,
                )
            )


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run`` and ``resume`` start no real supervisor: this test process stands in for it."""

    def spawn(run: RunDir, **_kwargs: Any) -> int:
        run.pid_file.write_text(str(os.getpid()))
        return os.getpid()

    monkeypatch.setattr(engine.run.launch, "spawn_supervisor", spawn)
    monkeypatch.setattr(engine.run.launch, "wait_until_serving", lambda run, pid, timeout=30.0: None)


# Each scene sets up a home and answers the command line to run; ``live`` holds what must
# stay up while it runs (a supervisor).
Scene = Callable[[Path, contextlib.ExitStack], list[str]]


def served_run(home: Path, live: contextlib.ExitStack) -> RunDir:
    """A run served by the real supervisor (in this process) with the fake trainer."""
    return live.enter_context(live_in_thread(home)).run


def answered(verb: str, *extra: str) -> Scene:
    """``memtui VERB RUN ID EXTRA --json`` on a directive proposed to a live supervisor."""

    def scene(home: Path, live: contextlib.ExitStack) -> list[str]:
        from engine.wire.protocol import Propose
        from memtui.client import new_request_id, request_once

        run = served_run(home, live)
        ok = request_once(run.socket, Propose(id=new_request_id(), values={"lr_multiplier": 0.5}))
        return [verb, run.run_id, ok.result["directive"]["id"], *extra, "--json"]

    return scene


def listed_runs(home: Path, live: contextlib.ExitStack) -> list[str]:
    stopped_run(home)
    return ["ls", "--json"]


def stored_verdicts(home: Path, live: contextlib.ExitStack) -> list[str]:
    run = stopped_run(home)
    with_decisions(run, 3)
    return ["directives", run.run_id, "--decisions", "--json"]


def fresh_run(home: Path, live: contextlib.ExitStack) -> list[str]:
    """A run whose supervisor has not made its store yet."""
    run = RunDir.create(build_run_config(name="new", steps=9), home)
    return ["directives", run.run_id, "--json"]


def on_stopped(*argv: str) -> Scene:
    """``memtui ARGV[0] RUN ARGV[1:] --json`` on a stopped run."""
    return lambda home, live: [argv[0], stopped_run(home).run_id, *argv[1:], "--json"]


SCENES: dict[str, Scene] = {
    "ls: no runs": lambda home, live: ["ls", "--json"],
    "ls: runs": listed_runs,
    "status: a run": on_stopped("status"),
    "checkpoints: none": on_stopped("checkpoints"),
    "directives: none": on_stopped("directives"),
    "directives: no store yet": fresh_run,
    "directives: pending, none": on_stopped("directives", "--pending"),
    "directives: no verdicts": on_stopped("directives", "--decisions"),
    "directives: verdicts": stored_verdicts,
    "doctor: this machine": lambda home, live: ["doctor", "--json"],
    "pause: a live run": lambda home, live: ["pause", served_run(home, live).run_id, "--json"],
    "unpause: a live run": lambda home, live: ["unpause", served_run(home, live).run_id, "--json"],
    "stop: an ended run": on_stopped("stop"),
    "run: detached": lambda home, live: ["run", "--detach", "--json"],
    "resume: detached": on_stopped("resume", "--detach"),
    "chaos: a live run": lambda home, live: ["chaos", served_run(home, live).run_id, "kill", "--json"],
    "chaos: the kinds, no run": lambda home, live: ["chaos", "--list", "--json"],
    "chaos: the kinds of a live run": lambda home, live: [
        "chaos",
        "--list",
        served_run(home, live).run_id,
        "--json",
    ],
    "report: a run": on_stopped("report"),
    "prepare: this machine": lambda home, live: ["prepare", "--json"],
    "plan: the default config": lambda home, live: ["plan", "--json"],
    "oom: none": on_stopped("oom"),
    "propose: a live run": lambda home, live: [
        "propose",
        served_run(home, live).run_id,
        "--set",
        "lr_multiplier=0.5",
        "--json",
    ],
    "approve: a pending directive": answered("approve"),
    "reject: a pending directive": answered("reject", "--reason", "not now"),
    "clamp: a pending directive": answered("clamp", "--set", "lr_multiplier=0.7"),
}
HEAVY = {"prepare: this machine"}
"""Scenes that import torch and DeepSpeed (and may build an op)."""
EMPTY = {"ls: no runs", "checkpoints: none", "directives: none", "directives: no store yet", "oom: none"} | {
    "directives: pending, none",
    "directives: no verdicts",
}


def test_every_json_command_is_covered() -> None:
    assert json_commands() == {scene.split(":")[0] for scene in SCENES}
    assert {"ls", "status", "checkpoints", "directives", "doctor", "pause", "stop"} <= json_commands()


@pytest.mark.parametrize(
    "scene", [pytest.param(s, marks=pytest.mark.deepspeed) if s in HEAVY else s for s in SCENES]
)
@pytest.mark.slow
def test_json_output_is_one_document(
    home: Path,
    launcher: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    scene: str,
) -> None:
    live_env(monkeypatch)
    with contextlib.ExitStack() as live:
        argv = SCENES[scene](home, live)
        capsys.readouterr()
        code = main(argv)
    out = capsys.readouterr().out
    assert code in (0, 1), scene  # doctor says 1 on an unhealthy machine
    document = json.loads(out)  # the whole of stdout: one document, nothing before or after
    assert isinstance(document, list if argv[0] in ("ls", "checkpoints", "directives", "oom") else dict), out
    if scene in EMPTY:
        assert document == []
    if argv[0] == "status":
        RunStatus.model_validate(document)


def test_verdicts_read_back_as_one_list_in_order(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = stopped_run(home)
    with_decisions(run, 12_000)  # more than two pages
    assert main(["directives", run.run_id, "--decisions", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["decision_id"] for r in rows] == [f"p-{i}" for i in range(12_000)]
    assert main(["directives", run.run_id, "--decisions", "--directive", "d-3", "--json"]) == 0
    assert {r["directive_id"] for r in json.loads(capsys.readouterr().out)} == {"d-3"}


def test_a_json_array_is_written_as_its_elements_come() -> None:
    """Streamed, not built: by the time the generator is asked for an element, every
    element before it is already written out."""
    out = io.StringIO()
    written_before: list[int] = []

    def elements() -> Iterator[dict[str, int]]:
        for i in range(5):
            written_before.append(out.getvalue().count('"i"'))
            yield {"i": i}

    assert stream_json_array(elements(), out) == 5
    assert written_before == [0, 1, 2, 3, 4]
    assert json.loads(out.getvalue()) == [{"i": i} for i in range(5)]
    empty = io.StringIO()
    assert stream_json_array(iter(()), empty) == 0 and json.loads(empty.getvalue()) == []
