"""Two "nodes" on this machine: two supervisors with one rank each, meeting at a rendezvous
on loopback, ZeRO-2, checkpoints in one shared directory.

- node 0's store gets every step with world size 2 and both ranks' memory; its status (what
  a console attached to node 0 reads) shows both ranks;
- a SIGKILL of node 1's rank brings the whole group back from the newest verified
  checkpoint: node 1's supervisor restarts its torchrun, node 0's rank sees its peer gone and
  its supervisor restarts too, and the two meet again at the endpoint;
- both supervisors end "completed": node 0 from its trainer's word, node 1 from its local
  leader's outcome file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from trainer_harness import MADE_HOMES, REPO_ROOT, wait_while_alive

from engine.checkpoints.catalog import committed_tags
from engine.config.config_file import build_run_config
from engine.events import CheckpointLoaded
from engine.run.directory import RunDir
from engine.run.reports.status import offline_status
from engine.run.storage.store import Store

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_runs(steps: int) -> list[RunDir]:
    """Node 0's and node 1's run directories, in homes of their own, one checkpoint dir."""
    scratch = Path(tempfile.mkdtemp(prefix="mtn", dir="/tmp"))
    MADE_HOMES.append(scratch)
    endpoint = f"127.0.0.1:{free_port()}"
    runs = []
    for node in (0, 1):
        raw = {
            "name": "nodes",
            "steps": steps,
            "train": {
                "nodes": 2,
                "node_rank": node,
                "rdzv_endpoint": endpoint,
                "zero_stage": 2,
                "global_batch": 16,
                "rank_report_every": 5,
                "warmup_steps": 5,
            },
            "checkpoint": {"dir": str(scratch / "shared"), "every_steps": 10},
            "restart": {"backoff_initial_s": 0.1},
        }
        runs.append(RunDir.create(build_run_config(raw), home=scratch / f"n{node}"))
    return runs


def supervise(run: RunDir) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "supervise", os.fspath(run.path)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        text=True,
    )


def logs(run: RunDir) -> str:
    return "".join(p.read_text()[-3000:] for p in sorted(run.logs.glob("*.log")))


def stepped(run: RunDir) -> int:
    if not run.store.exists():
        return 0
    with Store(run.store, readonly=True) as store:
        latest = store.latest_step()
    return latest.step if latest is not None else 0


def ranks_of(supervisor_pid: int) -> list[psutil.Process]:
    """The rank processes under a supervisor's torchrun."""
    tree = psutil.Process(supervisor_pid).children(recursive=True)
    return [
        p
        for p in tree
        if "engine.trainer" in " ".join(p.cmdline()) and "torch.distributed.run" not in " ".join(p.cmdline())
    ]


def test_two_nodes_train_as_one_group_and_come_back_from_a_killed_rank() -> None:
    node0, node1 = node_runs(steps=60)
    procs = [supervise(node0), supervise(node1)]
    try:
        wait_while_alive(
            procs[0],
            lambda: any(step >= 20 for step, _ in committed_tags(node0.checkpoints)),
            what="checkpoint 20 in the shared directory",
            timeout=300,
        )
        status = offline_status(node0)
        assert status.world_size == 2 and [r.rank for r in status.ranks or []] == [0, 1], status
        (rank,) = ranks_of(procs[1].pid)
        rank.send_signal(signal.SIGKILL)
        for proc in procs:
            assert proc.wait(timeout=300) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for run in (node0, node1):
        assert offline_status(run).state == "completed", logs(run)
    with Store(node0.store, readonly=True) as store:
        steps = store.steps()
        events = store.events_since(0)
    assert {s.world_size for s in steps} == {2} and max(s.step for s in steps) == 60
    loaded = [CheckpointLoaded.of(e) for e in events if e.type == CheckpointLoaded.event_type]
    assert loaded and all(x is not None and x.step >= 20 for x in loaded), logs(node0)
    attempts = {s.attempt for s in steps}
    assert len(attempts) >= 2, logs(node0)  # node 0's group was restarted, not left hanging
    assert any(s.ranks and [r.rank for r in s.ranks] == [0, 1] for s in steps if s.attempt == max(attempts))
    assert "follows node 0" in (offline_status(node1).node or "")
