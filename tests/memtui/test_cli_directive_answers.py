"""``memtui approve | reject | clamp | propose`` against the fake engine: RUN is the first
positional as in every other command (``--run`` still read), an operator's rejection exits
0, a policy's refusal 1, and ``propose --reset`` asks for a field's run default."""

from __future__ import annotations

import pytest

from engine.protocol import Approve, Propose, Reject
from engine.run.directory import RunDir
from memtui.cli.main import main
from tests.fakes.fake_engine import FakeEngine, make_directive


def test_an_operators_rejection_exits_0_with_run_first(
    live_run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id) as fake:
        fake.propose(make_directive("d-1"))
        assert main(["reject", live_run.run_id, "d-1", "--reason", "not now"]) == 0
        sent = fake.requests[-1]
        assert isinstance(sent, Reject) and sent.directive_id == "d-1" and sent.reason == "not now"
    out = capsys.readouterr().out
    assert out.startswith("d-1  rejected")


def test_approve_takes_run_first_and_still_reads_the_old_option(
    live_run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id) as fake:
        fake.propose(make_directive("d-1"))
        fake.propose(make_directive("d-2"))
        assert main(["approve", live_run.run_id, "d-1"]) == 0
        assert main(["approve", "d-2", "--run", live_run.run_id]) == 0
        assert [(m.kind, m.directive_id) for m in fake.requests if isinstance(m, Approve)] == [
            ("approve", "d-1"),
            ("approve", "d-2"),
        ]
    assert "lr × 1→0.5" in capsys.readouterr().out  # from the value in effect to the new one


def test_a_clamp_the_policy_refuses_exits_1(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id) as fake:
        fake.propose(make_directive("d-1"))
        assert main(["clamp", live_run.run_id, "d-1", "--set", "lr_multiplier=0.95"]) == 1  # over 0.85
    assert "d-1  rejected" in capsys.readouterr().out


def test_propose_reset_asks_for_the_run_default(live_run: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id) as fake:
        assert main(["propose", live_run.run_id, "--reset", "lr_multiplier"]) == 0
        sent = fake.requests[-1]
        assert isinstance(sent, Propose) and sent.reset == ["lr_multiplier"] and sent.values == {}
    assert "lr × 1" in capsys.readouterr().out
    assert main(["propose", live_run.run_id]) == 2  # neither --set nor --reset
    assert main(["propose", live_run.run_id, "--reset", "learning_rate"]) == 2
    assert "--reset" in capsys.readouterr().err


def test_a_rejection_asked_for_exits_0_in_the_old_spelling_too(
    live_run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id) as fake:
        fake.propose(make_directive("d-1"))
        assert main(["reject", "d-1", "--run", live_run.run_id, "--reason", "not now"]) == 0
    assert "d-1  rejected" in capsys.readouterr().out


def test_propose_rollback_sends_the_tag_and_skip_and_shows_the_policys_answer(
    live_run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeEngine.in_thread(live_run.socket, run_id=live_run.run_id) as fake:
        argv = ["propose", live_run.run_id, "--rollback", "global_step40", "--skip-batches", "10"]
        assert main(argv) == 1  # the fake run has no checkpoint that verifies: the policy refuses
        sent = fake.requests[-1]
        assert isinstance(sent, Propose)
        assert sent.values == {"rollback": {"tag": "global_step40", "skip_batches": 10}}
    out = capsys.readouterr().out
    assert "roll back to global_step40, skip 10 steps of data" in out
    assert "not a checkpoint of this run that verifies" in out
    assert main(["propose", live_run.run_id, "--skip-batches", "3"]) == 2  # a skip without a tag
    assert "--rollback" in capsys.readouterr().err
