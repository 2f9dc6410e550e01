"""Supervisor chaos against a real DeepSpeed trainer: a corrupted newest checkpoint that the
restart after a kill rejects, and a preemption the run is restarted after; each injection's
``chaos_recovered`` says it recovered, with the same chaos id."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_harness import memtui, throwaway_home

from engine.chaos.kinds.corrupt_checkpoint import CorruptCheckpoint
from engine.chaos.kinds.processes import Kill, Preempt
from engine.chaos.table import ChaosRequest
from engine.checkpoints.catalog import committed_tags
from engine.events import ChaosRecovered
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import PROTOCOL_VERSION, Chaos, Hello, decode_server, encode
from tests.waiting import CLI_POLL_S, wait_for

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e, pytest.mark.timeout(300)]

CONFIG = """name = "chaos"
steps = 100000
[checkpoint]
every_steps = 5
keep = 3
[restart]
on_preemption = true
backoff_initial_s = 0.1
"""


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtc")


def ask(run: RunDir, request: ChaosRequest) -> Any:
    """One Chaos request over the run's socket; its Ok or Error."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(run.socket))
        sock.sendall(encode(Hello(protocol=PROTOCOL_VERSION, telemetry=False)))
        sock.sendall(encode(Chaos(id="x", request=request)))
        reader = sock.makefile("rb")
        while True:
            message = decode_server(reader.readline())
            if message.kind in ("ok", "error") and getattr(message, "id", None) == "x":
                return message


def state(home: Path, run: RunDir) -> str:
    return str(json.loads(memtui(home, "status", run.run_id, "--json").stdout)["state"])


def verdict(run: RunDir, chaos_id: str) -> ChaosRecovered | None:
    with Store(run.store, readonly=True) as store:
        found = [ChaosRecovered.of(e) for e in store.events_since(0) if e.type == "chaos_recovered"]
    return next((v for v in found if v is not None and v.chaos_id == chaos_id), None)


def test_corruption_kill_and_preemption_are_recovered(home: Path) -> None:
    config = home / "chaos.toml"
    config.write_text(CONFIG)
    done = memtui(home, "run", str(config), "--detach", "--json")
    assert done.returncode == 0, done.stderr
    run = RunDir(Path(json.loads(done.stdout)["run_dir"]))
    try:
        wait_for(lambda: len(committed_tags(run.checkpoints)) >= 2, timeout=180, what="two checkpoints")
        assert memtui(home, "pause", run.run_id).returncode == 0  # no save between the two
        wait_for(lambda: state(home, run) == "paused", what="the trainer to hold", every_s=CLI_POLL_S)
        corrupted = ask(run, CorruptCheckpoint())
        assert corrupted.kind == "ok", corrupted
        killed = ask(run, Kill())
        assert killed.kind == "ok", killed
        caught = wait_for(lambda: verdict(run, corrupted.result["chaos_id"]), timeout=120, what="rejection")
        assert caught.recovered and "rejected" in caught.detail, caught
        assert memtui(home, "unpause", run.run_id).returncode == 0
        back = wait_for(lambda: verdict(run, killed.result["chaos_id"]), timeout=120, what="a restart")
        assert back.recovered, back
        preempted = ask(run, Preempt())
        assert preempted.kind == "ok", preempted
        again = wait_for(lambda: verdict(run, preempted.result["chaos_id"]), timeout=120, what="a restart")
        assert again.recovered, again
    finally:
        memtui(home, "stop", run.run_id)
