"""Several ``memtui resume`` at once on one stopped run: one supervisor serves it.

The real CLI and the real supervisor, with the torch-free fake trainer. Each resume either
starts the run's supervisor, or says which supervisor serves the run ("already served",
exit 0): found live before it starts one, or told by the supervisor it started, which
found the run owned and left without touching it. Either way the pid it names is the
owner's, and the run goes on to complete with its socket intact.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import MEMTUI, cli_environment, memtui, throwaway_home

from engine.run.directory import RunDir, pid_alive
from engine.run.reports.status import offline_status
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FAKE_TRAINER = Path(__file__).resolve().parent / "fakes" / "fake_trainer.py"
RESUMES = 8  # CLIs started at once; a tester saw two supervisors with 4 to 6


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mto")


def fake_trainer_env(**fake: object) -> dict[str, str]:
    env = {"MEMTUI_TRAINER_CMD": f"{sys.executable} {FAKE_TRAINER}"}
    env.update({f"FAKE_TRAINER_{key.upper()}": str(value) for key, value in fake.items()})
    return env


def stopped_run(home: Path) -> RunDir:
    """A run started by ``memtui run --detach`` and stopped by ``memtui stop``."""
    started = memtui(
        home, "run", "--preset", "tiny", "--steps", "40", "--detach", "--json",
        env=fake_trainer_env(steps=100000, rate_hz=50),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run = RunDir(Path(json.loads(started.stdout)["run_dir"]))
    wait_for(lambda: offline_status(run).step > 0, what="the first step", seen=lambda: offline_status(run))
    memtui(home, "stop", run.run_id)
    assert offline_status(run).state == "stopped" and run.supervisor_pid() is None
    return run


def test_concurrent_resumes_start_one_supervisor_and_name_it(home: Path) -> None:
    run = stopped_run(home)
    gate = home / "gate"  # the resumed trainer's first step waits for it: the run outlasts the CLIs
    env = cli_environment(home, fake_trainer_env(steps=40, rate_hz=50, gate=gate))
    clis = [
        subprocess.Popen(
            [MEMTUI, "resume", run.run_id, "--detach", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RESUMES)
    ]
    answers = [(cli.wait(120), *cli.communicate(timeout=10)) for cli in clis]

    owner = run.supervisor_pid()
    assert owner is not None, answers
    documents = [json.loads(out) for code, out, _ in answers if code == 0]
    assert all(code == 0 for code, _, _ in answers), answers  # the run is served: no resume failed
    # Every resume that answered 0 names the one supervisor that serves the run.
    assert [d["supervisor_pid"] for d in documents] == [owner] * len(documents), answers
    assert [d.get("already_served", False) for d in documents].count(False) == 1, answers
    # The others found it served: before they started a supervisor (the run was live), or
    # their supervisor found it locked and left, saying so in the log.
    log = run.supervisor_log.read_text()
    assert log.count(f"already served by supervisor pid {owner}") <= RESUMES - 1, log
    assert "Traceback" not in log and "IntegrityError" not in log, log

    assert run.socket.is_socket() and pid_alive(owner)
    gate.touch()
    wait_for(
        lambda: offline_status(run).state == "completed",
        timeout=120,
        what="the resumed run to complete",
        seen=lambda: (offline_status(run).state, offline_status(run).exit_reason),
    )
    wait_for(lambda: not pid_alive(owner), timeout=60, what=f"the supervisor (pid {owner}) to exit")
    status = offline_status(run)
    assert (status.state, status.step) == ("completed", 40), status
    assert not run.socket.exists() and run.supervisor_pid() is None
