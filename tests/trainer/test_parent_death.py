"""A spare trainer (and a rank under torchrun) dies with its parent, including a parent that
was already gone when the child asked the kernel for it (the supervisor that lost a
concurrent ``memtui resume`` left its head-start spare running under init for minutes); a
spare still warming up answers a request for its stacks instead of dying of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_harness import make_run

from engine.domain import STACK_DUMP_SIGNAL
from engine.run.standby_orders import HEAD_START_ENV, PARENT_ENV, READY
from engine.supervisor.trainers.spare_launch import spare_environment, spare_popen
from tests.waiting import wait_for

pytestmark = pytest.mark.slow  # starts processes

CHILD = (
    "from engine.trainer.ranks.parent_death import die_with_parent\n"
    "die_with_parent({parent})\nprint('alive')\n"
)


def child(parent: int | None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", CHILD.format(parent=parent)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_whose_parent_is_not_the_one_that_started_it_kills_itself() -> None:
    # The parent named is not this child's parent: as for a spare whose supervisor exited
    # before the spare's interpreter ran (its parent is init, or a subreaper, by then).
    gone = child(parent=1)
    assert gone.returncode == -signal.SIGKILL and "alive" not in gone.stdout, gone
    lives = child(parent=os.getpid())
    assert lives.returncode == 0 and lives.stdout == "alive\n", lives
    assert child(parent=None).stdout == "alive\n"  # no parent named: the parent it finds


def test_a_spare_is_told_which_supervisor_started_it() -> None:
    run = make_run({"name": "p"})
    (run.path / "logs").mkdir(exist_ok=True)
    probe = [sys.executable, "-c", f"import os; print(os.environ[{PARENT_ENV!r}])"]
    spare = spare_popen(run, probe, spare_environment())
    out, _ = spare.communicate(timeout=120)
    assert out.decode().strip() == str(os.getpid())


SPARE = """
import pathlib, sys, time
from engine.trainer.standby import await_orders
gate = pathlib.Path(sys.argv[1])
def warm():
    (gate.parent / "warming").touch()
    while not gate.exists():
        time.sleep(0.01)
print("orders:", await_orders(warm), file=sys.stderr)
"""


def test_a_warming_spare_asked_for_its_stacks_writes_them_and_warms_on(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    env = {**os.environ, HEAD_START_ENV: "1", PARENT_ENV: str(os.getpid())}  # warms in its main thread
    spare = subprocess.Popen(
        [sys.executable, "-c", SPARE, str(gate)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for(lambda: (tmp_path / "warming").exists() or spare.poll() is not None, what="the spare warming")
    os.kill(spare.pid, signal.Signals[STACK_DUMP_SIGNAL])  # it died of SIGUSR1's default action
    gate.touch()
    out, err = spare.communicate(b"", timeout=120)  # no orders: the spare is not needed
    assert spare.returncode == 0 and out == READY, (spare.returncode, err.decode()[-2000:])
    assert b"most recent call first" in err and b"in warm" in err and b"orders: None" in err
