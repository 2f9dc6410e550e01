"""``memtui approve | reject | clamp | propose`` against the real supervisor (in process, with
the fake trainer): RUN is the first positional as in every other command (``--run`` still
read), an operator's rejection exits 0, a policy's refusal 1, and ``propose --reset`` asks for a
field's run default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.wire.protocol import Propose
from memtui.cli.main import main
from memtui.client import new_request_id, request_once
from tests.live_supervisor import LiveRun, live_env, live_in_thread

pytestmark = pytest.mark.slow  # starts real processes (tests/conftest.py)


@pytest.fixture
def live(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveRun]:
    live_env(monkeypatch)
    with live_in_thread(home) as run:
        yield run


def propose(live: LiveRun) -> str:
    """A pending directive that lowers the LR to half: its id."""
    answer = request_once(live.run.socket, Propose(id=new_request_id(), values={"lr_multiplier": 0.5}))
    return str(answer.result["directive"]["id"])


def test_an_operators_rejection_exits_0_with_run_first(
    live: LiveRun, capsys: pytest.CaptureFixture[str]
) -> None:
    d1 = propose(live)
    assert main(["reject", live.run.run_id, d1, "--reason", "not now"]) == 0
    rejected = live.directive(d1)
    assert rejected.state == "rejected" and "not now" in " ".join(rejected.reasons)
    assert capsys.readouterr().out.startswith(f"{d1}  rejected")


def test_approve_takes_run_first_and_still_reads_the_old_option(
    live: LiveRun, capsys: pytest.CaptureFixture[str]
) -> None:
    d1, d2 = propose(live), propose(live)
    assert main(["approve", live.run.run_id, d1]) == 0
    assert main(["approve", d2, "--run", live.run.run_id]) == 0
    assert {live.directive(d).state for d in (d1, d2)} <= {"approved", "applied"}
    assert "lr × 1→0.5" in capsys.readouterr().out  # from the value in effect to the new one


def test_a_clamp_the_policy_refuses_exits_2(live: LiveRun, capsys: pytest.CaptureFixture[str]) -> None:
    d1 = propose(live)
    assert main(["clamp", live.run.run_id, d1, "--set", "lr_multiplier=0.95"]) == 2  # over 0.85: refused
    assert f"{d1}  rejected" in capsys.readouterr().out
    assert live.directive(d1).state == "rejected"


def test_propose_reset_asks_for_the_run_default(live: LiveRun, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["propose", live.run.run_id, "--reset", "lr_multiplier"]) == 0
    assert "lr × 1" in capsys.readouterr().out
    (view,) = live.supervisor.directives.views() if live.supervisor.directives else []
    assert view.requested == {"lr_multiplier": 1.0}  # the run's default
    assert main(["propose", live.run.run_id]) == 2  # neither --set nor --reset
    assert main(["propose", live.run.run_id, "--reset", "learning_rate"]) == 2
    assert "--reset" in capsys.readouterr().err


def test_a_rejection_asked_for_exits_0_in_the_old_spelling_too(
    live: LiveRun, capsys: pytest.CaptureFixture[str]
) -> None:
    d1 = propose(live)
    assert main(["reject", d1, "--run", live.run.run_id, "--reason", "not now"]) == 0
    assert f"{d1}  rejected" in capsys.readouterr().out


def test_propose_rollback_sends_the_tag_and_skip_and_shows_the_policys_answer(
    live: LiveRun, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["propose", live.run.run_id, "--rollback", "global_step40", "--skip-batches", "10"]
    assert main(argv) == 2  # the run has no checkpoint global_step40 that verifies: the policy refuses
    (view,) = live.supervisor.directives.views() if live.supervisor.directives else []
    assert view.state == "rejected"  # and what it asked for is what the policy judged:
    out = capsys.readouterr().out
    assert "roll back to global_step40, skip 10 steps of data" in out
    assert "not a checkpoint of this run that verifies" in out
    assert main(["propose", live.run.run_id, "--skip-batches", "3"]) == 2  # a skip without a tag
    assert "--rollback" in capsys.readouterr().err
