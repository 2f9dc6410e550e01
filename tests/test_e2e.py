"""End to end: the real `memtui` CLI starting a real engine (supervisor + DeepSpeed trainer).

These are the slowest tests in the suite (DeepSpeed start-up is a few seconds per run).
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import MEMTUI, memtui, throwaway_home

from engine.run.directory import RunDir, list_runs
from tests.file_modes import loose_modes
from tests.waiting import CLI_POLL_S, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.deepspeed]


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mte")


def status(home: Path, run_id: str) -> dict:
    done = memtui(home, "status", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def start_detached(home: Path, *args: str) -> str:
    """`memtui run --detach` in its own process group, as a shell would start it."""
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    cli = subprocess.Popen(
        [MEMTUI, "run", "--preset", "tiny", "--detach", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        umask=0o022,  # a typical login shell's: the run must be private anyway
    )
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    runs = list_runs(home)
    assert len(runs) == 1, out
    # The CLI's process group is gone; killing it again (as a closed terminal would) is harmless.
    with pytest.raises(ProcessLookupError):
        os.killpg(cli.pid, signal.SIGHUP)
    return runs[0].run_id


def test_detached_run_survives_sighup_and_stops_cleanly(home: Path) -> None:
    run_id = start_detached(home, "--steps", "100000")
    first = wait_for(
        lambda: (s := status(home, run_id))["step"] > 0 and s, timeout=120, what="the first step"
    )
    assert first["state"] == "running"

    run = RunDir(home / "runs" / run_id)
    pid = run.supervisor_pid()
    assert pid is not None and os.getsid(pid) != os.getsid(0)  # detached: its own session
    os.kill(pid, signal.SIGHUP)  # what an SSH hang-up would send

    second = wait_for(
        lambda: (s := status(home, run_id))["step"] > first["step"] and s, timeout=60, what="more steps"
    )
    assert second["state"] == "running"
    for key in (
        "loss",
        "tokens_per_s",
        "loss_scale",
        "mem_allocated",
        "mem_reserved",
        "mem_capacity",
        "micro_batch",
        "grad_accum",
        "restarts",
    ):
        assert second[key] is not None, key

    stopped = memtui(home, "stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    final = status(home, run_id)
    assert final["state"] == "stopped"
    assert final["step"] >= second["step"]
    assert run.supervisor_pid() is None and not run.socket.exists()


def test_short_run_completes_and_every_step_is_in_the_store(home: Path) -> None:
    from engine.run.storage.store import Store

    run_id = start_detached(home, "--steps", "40")
    run = RunDir(home / "runs" / run_id)
    wait_for(
        lambda: status(home, run_id)["state"] in ("completed", "failed"), timeout=180, what="the run to end"
    )
    final = status(home, run_id)
    assert final["state"] == "completed", final
    store = Store(run.store, readonly=True)
    try:
        steps = [s.step for s in store.steps()]
        assert steps == list(range(1, 41))
        events = store.events_since(0)
        kinds = [e.type for e in events]
        assert "trainer_started" in kinds and "run_ended" in kinds
        # The real trainer said its start-up, phase by phase, all before its first step.
        phases = [e for e in events if e.type == "startup_phase"]
        names = [e.data["phase"] for e in phases]
        assert names[-2:] == ["initialising", "first_step"], names
        # importing said once at most: by a cold trainer, or by the supervisor for a head start
        # handed its attempt mid-import; a spare that had imported has no such phase
        assert [i for i, name in enumerate(names) if name == "importing"] in ([], [0]), names
        assert set(names) <= {"importing", "building_op", "waiting_for_build", "initialising", "first_step"}
        first_step_ts = next(iter(store.steps())).ts
        assert all(e.ts <= first_step_ts and e.attempt == 1 for e in phases)
    finally:
        store.close()

    listed = json.loads(memtui(home, "ls", "--json").stdout)
    assert [(r["run_id"], r["state"]) for r in listed] == [(run_id, "completed")]
    # Private by default: DeepSpeed's checkpoint files, the store, the logs, every directory.
    assert list(run.checkpoints.glob("global_step*/*.pt"))
    assert loose_modes(run.path) == []


class Terminal:
    """The master side of a console's pseudo-terminal: everything it has drawn so far."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.output = b""

    def read(self) -> bytes:
        """Take what the console has written since the last read (never blocks); all of it so far.
        Read often: a console whose terminal buffer is full stops drawing."""
        while select.select([self.fd], [], [], 0)[0]:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # the console has gone: its side of the terminal is closed
                break
            if not chunk:
                break
            self.output += chunk
        return self.output


ANSI_ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>]")


def steps_on_screen(output: bytes) -> list[int]:
    """Step numbers the header drew (``step N/TARGET``), in the order they were drawn."""
    text = ANSI_ESCAPE.sub(b"", output).decode("utf-8", "replace")
    return [int(n) for n in re.findall(r"step (\d+)/\d+", text)]


def console_exited(pid: int, terminal: Terminal) -> bool:
    """Whether the console ``pid`` has exited (reaped here); its terminal is kept drained meanwhile."""
    terminal.read()
    return os.waitpid(pid, os.WNOHANG)[0] == pid


@contextlib.contextmanager
def console_in_a_terminal(home: Path, run_id: str) -> Iterator[tuple[int, Terminal]]:
    """``memtui attach RUN`` in a 100x30 pseudo-terminal: (its pid, the terminal); killed at the end."""
    pid, fd = pty.fork()
    if pid == 0:  # child: the console, session leader of its own terminal
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a login shell, even under nohup
        os.environ.update(MEMTUI_HOME=str(home), TERM="xterm-256color", COLUMNS="100", LINES="30")
        os.execv(MEMTUI, [MEMTUI, "attach", run_id])
    try:
        yield pid, Terminal(fd)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def test_console_in_a_terminal_shows_the_run_and_q_only_detaches(home: Path) -> None:
    run_id = start_detached(home, "--steps", "100000")
    wait_for(lambda: status(home, run_id)["step"] > 0, timeout=120, what="the first step", every_s=CLI_POLL_S)

    with console_in_a_terminal(home, run_id) as (pid, terminal):
        wait_for(
            lambda: len(set(steps_on_screen(terminal.read()))) >= 2,
            timeout=60,
            what="the step to advance on screen",
            seen=lambda: steps_on_screen(terminal.output),
        )
        assert run_id.encode() in terminal.output
        os.write(terminal.fd, b"q")
        wait_for(lambda: console_exited(pid, terminal), timeout=30, what="q to close the console")
        said = ANSI_ESCAPE.sub(b"", terminal.read()).decode("utf-8", "replace")
        assert f"detached from {run_id}; it goes on — memtui attach {run_id} to come back" in said
    assert status(home, run_id)["state"] == "running"  # detaching never stops the run
    seen = max(steps_on_screen(terminal.output))
    wait_for(
        lambda: status(home, run_id)["step"] > seen,
        timeout=60,
        what="steps after the console detached",
        every_s=CLI_POLL_S,
    )

    # A closed terminal or SSH hang-up while attached: SIGHUP to the console's whole
    # process group (pty.fork made it a session leader). The console goes; the run does not.
    with console_in_a_terminal(home, run_id) as (pid, terminal):
        wait_for(
            lambda: steps_on_screen(terminal.read()), timeout=60, what="the second console to draw a step"
        )
        os.killpg(pid, signal.SIGHUP)
        wait_for(lambda: console_exited(pid, terminal), timeout=30, what="SIGHUP to end the console")
    hung_up = status(home, run_id)
    assert hung_up["state"] == "running"
    wait_for(
        lambda: status(home, run_id)["step"] > hung_up["step"], timeout=60, what="steps after the hang-up"
    )
    assert memtui(home, "stop", run_id).returncode == 0


def test_the_guide_example_trains_a_user_workload(home: Path) -> None:
    """docs/your-model.md, "Training your own model": examples/sine.toml with examples/sine_workload.py."""
    from engine.run.storage.store import Store

    config = Path(__file__).resolve().parents[1] / "examples" / "sine.toml"
    started = memtui(home, "run", str(config), "--steps", "120", "--detach")
    assert started.returncode == 0, started.stderr
    (run,) = list_runs(home)
    wait_for(
        lambda: status(home, run.run_id)["state"] in ("completed", "failed"),
        timeout=180,
        what="the run to end",
    )
    assert status(home, run.run_id)["state"] == "completed"
    with Store(run.store, readonly=True) as store:
        losses = [s.loss for s in store.steps()]
        geometry = {(s.micro_batch, s.grad_accum) for s in store.steps()}
    assert len(losses) == 120 and geometry == {(32, 2)}
    assert sum(losses[-20:]) / 20 < 0.25 * sum(losses[:20]) / 20  # the MLP really fits sin(x)
