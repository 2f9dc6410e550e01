"""Several nodes at the rendezvous, seen by each node's supervisor: the id they meet under,
the wait said as a start-up phase, and a wait that ends at the join timeout with one line
naming the likely mismatch.

The watch's decisions are tested with a stand-in for torchrun's sockets and a clock; node
0's wait for a dead node 1 with the real torchrun on loopback (no trainer ever starts: no
DeepSpeed is needed).
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.events import RendezvousTimedOut, RendezvousWait, StartupPhase, TrainerExited, TrainerLaunched
from engine.rendezvous import rendezvous_id
from engine.run.directory import RunDir
from engine.run.node_outcome import write_node_outcome
from engine.run.storage.store import Store
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.hangs.hang_recovery import HangRecovery
from engine.supervisor.journal import Journal
from engine.supervisor.rendezvous.rendezvous_sockets import RendezvousSeen
from engine.supervisor.rendezvous.rendezvous_watch import RendezvousWatch
from engine.supervisor.trainers.trainer_process import Placement, default_trainer_command
from memtui.status_report import render_status
from tests.waiting import until

pytestmark = pytest.mark.timeout(180)  # each wait ends when its condition holds

PEER_LOST_ONCE = Path(__file__).resolve().parents[1] / "fakes" / "peer_lost_once.py"
ENDPOINT = "10.0.0.1:29500"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_config(
    name: str, node_rank: int, endpoint: str = ENDPOINT, shared: str = "/shared/ckpt", **train: Any
) -> Any:
    raw = {
        "name": name,
        "train": {"nodes": 2, "node_rank": node_rank, "rdzv_endpoint": endpoint, "global_batch": 16, **train},
        "checkpoint": {"dir": shared},
    }
    return build_run_config(raw)


# ------------------------------------------------------------------ the rendezvous id


def test_hosts_running_one_config_under_other_names_meet_under_one_id() -> None:
    a, b = node_config("exp-a", 0), node_config("exp-b", 1)
    assert Placement.of(a).rdzv_id == Placement.of(b).rdzv_id == rendezvous_id(a)
    assert f"--rdzv-id={rendezvous_id(a)}" in default_trainer_command({}, Placement.of(b))
    # what the nodes must agree on changes the id: the endpoint, the training content
    assert rendezvous_id(node_config("exp-a", 0, "10.0.0.2:29500")) != rendezvous_id(a)
    assert rendezvous_id(node_config("exp-a", 0, lr=1e-4)) != rendezvous_id(a)
    assert rendezvous_id(node_config("exp-a", 0, rdzv_id="mine")) == "mine"  # named: it wins


# ------------------------------------------------- the watch, with a stand-in torchrun


class Harness:
    """A RendezvousWatch over a real journal, with torchrun's sockets and the clock set by hand."""

    def __init__(self, home: Path, node_rank: int) -> None:
        self.run = RunDir.create(build_run_config({}), home=home)
        self.store = Store(self.run.store)
        self.journal = Journal(self.store, Consoles())
        self.attempts: Any = SimpleNamespace(
            follower=node_rank > 0, run=self.run, stop_reason=None, pid=4242, held=False
        )
        self.seen = RendezvousSeen(met=False, joined=None, reached=False)
        self.now = 0.0
        self.ended: list[str] = []
        wait = RendezvousWait(endpoint=ENDPOINT, rdzv_id="memtui-0123456789ab", nodes=2, node_rank=node_rank)
        self.watch = RendezvousWatch(
            self.journal,
            self.attempts,
            wait.model_copy(update={"timeout_s": 300.0}),
            end_run=self.ended.append,
            looker=lambda pid, port: self.seen,
            clock=lambda: self.now,
        )

    def launch(self, attempt: int = 1) -> None:
        self.journal.record(TrainerLaunched(attempt=attempt, pid=4242, command=["torchrun"]), attempt=attempt)

    def events(self, type_: str) -> list[Any]:
        return [e for e in self.store.events_since(0) if e.type == type_]


@pytest.fixture
def harness(home: Path, request: pytest.FixtureRequest) -> Any:
    made = Harness(home, getattr(request, "param", 0))
    yield made
    made.store.close()


@pytest.mark.parametrize(
    ("harness", "seen", "line"),
    [
        (
            0,
            RendezvousSeen(met=False, joined=1, reached=True),
            f"node 1 never joined at {ENDPOINT} within 300 s (1 of 2 nodes): not started, or started "
            "with another train.rdzv_endpoint (this node's rendezvous id is memtui-0123456789ab)",
        ),
        (
            0,
            RendezvousSeen(met=False, joined=2, reached=True),
            f"all 2 nodes reached {ENDPOINT} but did not agree within 300 s: another node meets under "
            "another rendezvous id (this node's rendezvous id is memtui-0123456789ab): their training "
            "configs, train.nodes or train.rdzv_id differ",
        ),
        (
            1,
            RendezvousSeen(met=False, joined=None, reached=False),
            f"node 1 could not reach node 0 at {ENDPOINT} within 300 s: node 0 not started, or started "
            "with another train.rdzv_endpoint (this node's rendezvous id is memtui-0123456789ab)",
        ),
        (
            1,
            RendezvousSeen(met=False, joined=None, reached=True),
            f"node 1 reached node 0 at {ENDPOINT} but the group did not form within 300 s: node 0 meets "
            "under another rendezvous id (this node's rendezvous id is memtui-0123456789ab): their "
            "training configs, train.nodes or train.rdzv_id differ",
        ),
    ],
    indirect=["harness"],
)
async def test_a_join_timeout_ends_the_run_with_one_line_naming_the_mismatch(
    harness: Harness, seen: RendezvousSeen, line: str
) -> None:
    harness.launch()
    harness.seen = seen
    harness.now = 299.0
    await harness.watch.tick()
    assert harness.ended == [] and not harness.events(RendezvousTimedOut.event_type)
    harness.now = 300.0
    await harness.watch.tick()
    (event,) = harness.events(RendezvousTimedOut.event_type)
    assert event.message == line and event.severity == "critical"
    assert harness.ended == [line]  # the run ends with that line as its reason
    await harness.watch.tick()
    assert len(harness.events(RendezvousTimedOut.event_type)) == 1


async def test_a_node_that_came_and_left_still_counts_at_the_timeout(harness: Harness) -> None:
    harness.launch()
    harness.seen = RendezvousSeen(met=False, joined=2, reached=True)
    await harness.watch.tick()
    harness.seen = RendezvousSeen(met=False, joined=1, reached=True)  # node 1 timed out first
    harness.now = 300.0
    await harness.watch.tick()
    assert harness.ended and harness.ended[0].startswith(f"all 2 nodes reached {ENDPOINT} but did not agree")


def test_the_hang_watch_leaves_a_wait_at_the_rendezvous_to_the_join_timeout(harness: Harness) -> None:
    hangs = HangRecovery(
        harness.attempts, harness.journal, 1.0, lambda: 0, at_rendezvous=harness.watch.waiting
    )
    harness.journal.set_state("restarting")
    assert hangs.watching()
    harness.launch()
    assert not hangs.watching()
    harness.journal.record(TrainerExited(attempt=1, returncode=1, reason="trainer exited with code 1"))
    assert hangs.watching()


async def test_the_wait_is_a_start_up_phase_with_the_nodes_joined(harness: Harness) -> None:
    harness.launch()
    harness.seen = RendezvousSeen(met=False, joined=1, reached=True)
    await harness.watch.tick()
    await harness.watch.tick()  # no news: said once
    phases = [StartupPhase.of(e) for e in harness.events(StartupPhase.event_type)]
    assert [p.rendezvous.joined for p in phases if p and p.rendezvous] == [None, 1]
    assert phases[-1] is not None and phases[-1].label() == (
        f"waiting for node 1 at {ENDPOINT} (1 of 2 nodes joined; rendezvous id memtui-0123456789ab)"
    )
    harness.seen = RendezvousSeen(met=True, joined=None, reached=True)
    await harness.watch.tick()
    (joined,) = harness.events("nodes_joined")
    assert joined.attempt == 1 and "the 2 nodes met" in joined.message
    harness.now = 1000.0  # met: no timeout any more
    await harness.watch.tick()
    assert harness.ended == []


@pytest.mark.parametrize("harness", [1], indirect=True)
async def test_a_follower_runs_once_the_nodes_met_and_waits_for_node_0s_resume_unbounded(
    harness: Harness,
) -> None:
    harness.launch(1)
    assert harness.journal.state == "starting"  # launched is not running: it waits at the rendezvous
    harness.seen = RendezvousSeen(met=True, joined=None, reached=True)
    await harness.watch.tick()
    assert harness.journal.state == "running"
    harness.journal.record(TrainerExited(attempt=1, returncode=0, reason="stopped by node 0"))
    write_node_outcome(harness.run, 1, "stopped")  # node 0 stopped the run
    harness.launch(2)
    harness.seen = RendezvousSeen(met=False, joined=None, reached=False)
    harness.now = 10_000.0
    await harness.watch.tick()
    assert harness.ended == []
    phase = StartupPhase.of(harness.events(StartupPhase.event_type)[-1])
    assert phase is not None and phase.label().startswith("waiting for node 0 to resume (it stopped the run)")


# ------------------------------------------- node 0 with the real torchrun on loopback


@pytest.fixture
def run(home: Path) -> RunDir:
    """Node 0 of two on loopback; node 1 is never started (it died)."""
    config = node_config("nodes", 0, f"127.0.0.1:{free_port()}", str(home / "shared"))
    return RunDir.create(config, home=home)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torchrun needs torch")
async def test_node_0_whose_node_1_died_says_it_waits_for_node_1(run: RunDir, start: Any) -> None:
    config = run.read_config()
    torchrun = default_trainer_command({}, Placement.of(config))
    # attempt 1 dies as a rank whose peer vanished; attempt 2 is the real torchrun, alone
    running = await start(trainer_cmd=[sys.executable, str(PEER_LOST_ONCE), *torchrun[1:]])
    supervisor = running.supervisor
    endpoint = config.train.rdzv_endpoint

    def label() -> str:
        status = supervisor.status()
        return status.startup.label if status.startup and status.startup.attempt == 2 else ""

    await until(lambda: "1 of 2 nodes joined" in label(), timeout=120, what="torchrun's store", seen=label)
    status = supervisor.status()
    assert status.state == "restarting"
    text = render_status(status, now=status.startup.since if status.startup else 0.0)
    assert (
        f"waiting for node 1 at {endpoint} (1 of 2 nodes joined; rendezvous id {rendezvous_id(config)})"
        in text
    )
    supervisor.request_stop("test over")
    assert await running.result(timeout=60) == 0
