"""``memtui chaos`` against a scripted engine transport: the request sent carries the typed values (sizes
with suffixes), ``--list`` shows what the supervisor advertises (or every kind, with a note,
when there is no live run), and bad input is one line naming the field, exit 2, nothing
sent; a run that is not running, or a refusal, is exit 1."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from engine.chaos.kinds.memory import Ballast
from engine.chaos.kinds.processes import Kill
from engine.chaos.kinds.slow_steps import SlowSteps
from engine.chaos.table import KINDS, chaos_specs
from engine.run.directory import RunDir
from engine.wire.protocol import Chaos, ClientMessage, Error, Ok, ServerMessage
from memtui.cli.main import main
from tests.fakes.run_script import FAKE_TRAINER_PID
from tests.fakes.scripted_engine import ScriptedEngine, answer_ok, welcome_for

ADVERTISED = ["ballast", "slow_steps", "kill"]


def chaos_sent(fake: ScriptedEngine) -> list[Chaos]:
    return [m for m in fake.requests if isinstance(m, Chaos)]


def engine(run: RunDir, kinds: list[str]) -> Any:
    """A supervisor that advertises ``kinds`` and answers a Chaos as the real one does: the
    chaos id, kind and the pid of a trainer it kills; an Error for a kind it does not perform."""
    ids = itertools.count(1)

    def reply(message: ClientMessage) -> list[ServerMessage]:
        if not isinstance(message, Chaos):
            return answer_ok(message)
        kind = message.request.kind
        if kind not in kinds:
            return [Error(id=message.id, reason=f"chaos {kind}: not performed by this engine")]
        pid = FAKE_TRAINER_PID if kind in ("kill", "preempt") else None
        return [Ok(id=message.id, result={"chaos_id": f"c-fake{next(ids)}", "kind": kind, "pid": pid})]

    welcome = welcome_for(run.run_id, chaos=chaos_specs(kinds))
    return ScriptedEngine.in_thread(run.socket, welcome, reply=reply)


def test_the_typed_values_reach_the_engine(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    with engine(live_run, ADVERTISED) as fake:
        assert main(["chaos", "ballast", "--bytes", "1G", "--steps", "10"]) == 0
        assert chaos_sent(fake)[-1].request == Ballast(bytes=1 << 30, steps=10)
        out = capsys.readouterr().out
        assert out == f"{live_run.run_id}: chaos c-fake1 injected: hold 1.00 GiB of ballast for 10 steps\n"

        argv = ["chaos", live_run.run_id, "slow-steps", "--delay-s=0.5", "--steps", "3", "--json"]
        assert main(argv) == 0
        assert chaos_sent(fake)[-1].request == SlowSteps(delay_s=0.5, steps=3)
        answer = json.loads(capsys.readouterr().out)
        assert answer["run_id"] == live_run.run_id and answer["chaos_id"] == "c-fake2"
        assert answer["kind"] == "slow_steps"
        assert answer["params"] == {"steps": 3, "factor": 3.0, "delay_s": 0.5, "jitter": 0.25, "rank": -1}
        assert main(["chaos", live_run.run_id, "slow_steps", "--rank", "0"]) == 0  # one straggler
        assert chaos_sent(fake)[-1].request == SlowSteps(rank=0)
        assert (
            capsys.readouterr()
            .out.rstrip()
            .endswith(
                "make each of the next 20 steps of rank 0 alone 3.0x as long (+ up to 25% more at random)"
            )
        )
        sent = len(chaos_sent(fake))
        assert main(["chaos", live_run.run_id, "slow_steps", "--rank", "1"]) == 2  # a 1-rank run
        assert "rank 1 is not in this run: its ranks are 0 to 0" in capsys.readouterr().err
        assert len(chaos_sent(fake)) == sent  # refused here: nothing was sent

        assert main(["chaos", "kill", "--json"]) == 0  # a kind without parameters
        assert chaos_sent(fake)[-1].request == Kill()
        assert json.loads(capsys.readouterr().out)["pid"] > 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["explode"], "unknown chaos kind 'explode' (choose from ballast, release,"),
        (["ballast", "--bytes", "-5"], "chaos ballast: --bytes: must be at least 1 B, got -5"),
        (["ballast", "--bytes", "-1G"], "chaos ballast: --bytes: must be at least 1 B, got -1G"),
        (["ballast", "--steps", "ten"], "chaos ballast: --steps: not an integer: 'ten'"),
        (["slow_steps", "--delay-s", "soon"], "chaos slow_steps: --delay-s: not a number: 'soon'"),
        (["oom", "--phase", "sideways"], "chaos oom: --phase: choose from forward, backward; got 'sideways'"),
        (["ballast", "--colour", "red"], "--colour: ballast has no such parameter (its parameters: bytes,"),
        (["kill", "--steps", "3"], "--steps: kill has no such parameter (its parameters: none)"),
        (["ballast", "--steps"], "--steps: needs a value"),
        (["ballast", "--steps", "1", "--steps", "2"], "--steps: given twice"),
        ([], "name a chaos kind"),
        (["a", "b", "kill"], "expected [RUN] KIND, got 'a b kill'"),
        (["--list", "r", "kill"], "--list takes only RUN"),
        (["--list", "ballast", "--bytes", "1G"], "--list takes only RUN"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_sent(
    live_run: RunDir, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with engine(live_run, list(KINDS)) as fake:
        with pytest.raises(SystemExit) as info:
            main(["chaos", *argv])
        assert info.value.code == 2
        assert fake.requests == []  # not even a Status: refused before the run is asked
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("memtui chaos: error: ")
    assert says in captured.err, captured.err


def test_bad_input_needs_no_run(home: object, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["chaos", "ballast", "--bytes", "-5"])
    assert info.value.code == 2
    assert "--bytes: must be at least 1 B" in capsys.readouterr().err


def test_chaos_on_a_stopped_run_is_exit_1(run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", run_dir.run_id, "kill"]) == 1
    err = capsys.readouterr().err
    assert err == f"memtui: {run_dir.run_id}: the run is not running (no supervisor to inject chaos into)\n"


def test_a_refusal_is_one_line_and_exit_1(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    with engine(live_run, ["kill"]) as fake:
        assert main(["chaos", "ballast", "--bytes", "64M"]) == 1
        assert [m.kind for m in fake.requests] == ["chaos"]
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"memtui: {live_run.run_id}: the supervisor refused: chaos ballast: not performed by this engine\n"
    )


def test_list_shows_what_the_supervisor_advertises(
    live_run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    with engine(live_run, ADVERTISED) as fake:
        assert main(["chaos", "--list"]) == 0
        out = capsys.readouterr().out
        assert main(["chaos", "--list", live_run.run_id, "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert chaos_sent(fake) == []
    assert out.startswith(f"{live_run.run_id}: the chaos kinds its supervisor performs\n")
    assert "  ballast " in out and "--bytes 256M" in out and "--factor 3.0" in out
    assert "nan_loss" not in out
    assert listed["run_id"] == live_run.run_id and listed["advertised"] is True and listed["note"] is None
    assert [k["kind"] for k in listed["kinds"]] == ADVERTISED
    assert listed["kinds"][0]["params"][0] == {
        "name": "bytes",
        "type": "int",
        "default": 256 << 20,
        "minimum": 1,
        "maximum": 1 << 40,
        "choices": [],
        "help": "Bytes of ballast held on the training device (host memory on the CPU).",
    }


def test_list_without_a_live_run_shows_every_kind_with_a_note(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chaos", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["advertised"] is False and listed["run_id"] is None and "no live run" in listed["note"]
    assert [k["kind"] for k in listed["kinds"]] == list(KINDS)
    assert main(["chaos", "--list", run_dir.run_id]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"note: {run_dir.run_id} is not running: every kind memtui knows\n")
    assert all(f"  {kind} " in out for kind in KINDS)


def test_other_commands_still_refuse_unknown_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["ls", "--bytes", "1G"])
    assert info.value.code == 2
    assert "unrecognized arguments: --bytes 1G" in capsys.readouterr().err


def test_help_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["chaos", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "memtui chaos [-h] [--json] [RUN] KIND [--PARAM VALUE ...]" in out
    assert "memtui chaos --list" in out and "--bytes 1G" in out


def test_the_cli_says_what_happens_to_this_run(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    with engine(live_run, ["kill", "preempt"]):
        assert main(["chaos", "preempt", "--json"]) == 0  # run.json: restart.on_preemption false
        assert "this run ends there" in json.loads(capsys.readouterr().out)["what"]
    with engine(live_run, ["kill"]):
        assert main(["chaos", "kill"]) == 0  # no checkpoint yet
        assert "restarts it from step 0 (no verified checkpoint yet)" in capsys.readouterr().out
