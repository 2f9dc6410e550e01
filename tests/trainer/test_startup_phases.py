"""The trainer's start-up phases as it says them (torch-free: a recording link, op states as
``engine.trainer.op_cache`` finds them)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from engine.domain import Severity
from engine.events import Payload, StartupPhase
from engine.trainer.op_cache import OpState, describe
from engine.trainer.telemetry.startup_phases import StartupPhases
from tests.waiting import wait_for


class RecordingLink:
    def __init__(self) -> None:
        self.stop_requested = threading.Event()
        self.pause_requested = threading.Event()
        self.said: list[tuple[Payload, str]] = []

    def send(self, message: BaseModel) -> None:
        raise AssertionError("phases are events")

    def event(self, payload: Payload, message: str = "", severity: Severity | None = None) -> None:
        self.said.append((payload, message))

    def close(self) -> None:
        pass


def phases_for(*states: OpState) -> list[tuple[Any, str]]:
    link = RecordingLink()
    phases = StartupPhases(link, attempt=2)
    for state in states:
        phases.op(state)
    return [(p.data(), message) for p, message in link.said]


def test_an_op_missing_from_the_cache_is_built_once_per_environment() -> None:
    ((data, message),) = phases_for(
        OpState("deepspeed_shm_comm", "/x/deepspeed_shm_comm", built=False, locked=False)
    )
    assert data["phase"] == "building_op" and data["op"] == "deepspeed_shm_comm" and data["attempt"] == 2
    assert message == (
        "building DeepSpeed op deepspeed_shm_comm (once per environment); "
        "cached in /x/deepspeed_shm_comm for later runs"
    )


def test_another_process_holding_the_build_lock_is_waited_for() -> None:
    ((data, message),) = phases_for(
        OpState("deepspeed_shm_comm", "/x/deepspeed_shm_comm", built=False, locked=True)
    )
    assert data["phase"] == "waiting_for_build" and data["lock"] == "/x/deepspeed_shm_comm/lock"
    assert (
        message
        == "waiting for another process's build of deepspeed_shm_comm (lock /x/deepspeed_shm_comm/lock)"
    )


def test_a_built_op_is_no_phase_of_its_own() -> None:
    assert phases_for(OpState("deepspeed_shm_comm", "/x/deepspeed_shm_comm", built=True, locked=False)) == []
    assert phases_for(OpState("deepspeed_shm_comm", "", built=True, locked=False)) == []  # pre-built


def test_every_phase_has_words() -> None:
    for name in (
        "importing",
        "building_op",
        "waiting_for_build",
        "initialising",
        "loading_checkpoint",
        "first_step",
    ):
        assert StartupPhase(phase=name, attempt=1, tag="global_step40").label()  # type: ignore[arg-type]
    assert StartupPhase(phase="loading_checkpoint", attempt=1, tag="global_step40").label() == (
        "loading checkpoint global_step40"
    )


def test_prepare_says_what_the_load_cost() -> None:
    assert describe(OpState("op", "/c/op", built=False, locked=False), 93.4) == (
        "op: built in 93 s, cached in /c/op for every later run"
    )
    assert "already built in /c/op" in describe(OpState("op", "/c/op", built=True, locked=False), 0.2)


def test_a_lock_taken_by_another_process_turns_building_into_waiting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engine.trainer import op_cache

    state = OpState("op", str(tmp_path), built=False, locked=False)
    (tmp_path / op_cache.LOCK_FILE).touch()  # another process took it; no compiler of ours runs
    heard = watch(state, tools=lambda: [], until=lambda heard: heard)
    assert heard == [OpState("op", str(tmp_path), built=False, locked=True)]


def test_a_cached_op_held_by_another_process_is_waited_for() -> None:
    """A ``.so`` in the cache while another process holds the lock: this load waits for its
    build (another environment's, rebuilding the op for itself)."""
    ((data, _),) = phases_for(OpState("deepspeed_shm_comm", "/x/deepspeed_shm_comm", built=True, locked=True))
    assert data["phase"] == "waiting_for_build"


def watch(
    state: OpState, tools: Callable[[], list[tuple[str, str]] | None], until: Callable[[list[OpState]], Any]
) -> list[OpState]:
    """What ``_watch_build`` says while an op loads, up to the moment ``until(heard)`` holds."""
    from engine.trainer import op_cache

    heard: list[OpState] = []
    done = threading.Event()
    watcher = threading.Thread(target=op_cache._watch_build, args=(state, heard.append, done, tools))
    watcher.start()
    try:
        wait_for(lambda: until(heard), what="the watcher to hear enough", seen=lambda: heard)
    finally:
        done.set()
        watcher.join()
    return heard


def test_a_compiler_at_work_in_the_op_directory_is_a_build_whatever_the_cache_held(tmp_path: Path) -> None:
    """torch rebuilds a cached op whenever the build.ninja it writes differs from the one on
    disk: a compiler of ours in the op's directory is a build, said as soon as it is seen;
    ninja alone (it runs at every load) and a compiler elsewhere are none."""
    cached = OpState("op", str(tmp_path), built=True, locked=False)
    looks = [[("ninja", str(tmp_path)), ("cc1plus", "/elsewhere")], [("cc1plus", str(tmp_path))]]
    heard = watch(cached, tools=lambda: looks.pop(0) if len(looks) > 1 else looks[0], until=lambda h: h)
    assert heard == [OpState("op", str(tmp_path), built=False, locked=False)]


@pytest.mark.slow
def test_a_cached_op_rebuilt_by_torch_is_said_to_be_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The op's ``.so`` is in the cache, but the build.ninja there is another environment's:
    torch's load compiles it again, and the trainer says ``building_op`` (it said nothing and
    stayed at "importing torch and DeepSpeed" for minutes). A real process named ``cc1plus``
    in the op's directory stands in for ninja's compiler."""
    from engine.trainer import op_cache

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    directory = tmp_path / "deepspeed_shm_comm"
    directory.mkdir()
    (directory / "deepspeed_shm_comm.so").touch()
    (directory / "build.ninja").write_text("cflags = -I/another/venv/site-packages/deepspeed\n")
    compiler = tmp_path / "cc1plus"
    compiler.symlink_to(shutil.which("sleep") or "/bin/sleep")  # its process name: cc1plus
    link = RecordingLink()
    phases = StartupPhases(link, attempt=1)

    class RebuildingBuilder:  # DeepSpeed's OpBuilder.load, as torch rebuilds the op
        name = "deepspeed_shm_comm"

        def load(self, verbose: bool) -> None:
            with subprocess.Popen([str(compiler), "600"], cwd=directory) as child:
                try:
                    wait_for(lambda: link.said, what="a phase said during the build")
                finally:
                    child.kill()

    op_cache._load(RebuildingBuilder(), phases.op)
    ((payload, message),) = link.said
    assert payload.data()["phase"] == "building_op" and payload.data()["cache"] == str(directory)
    assert message.startswith("building DeepSpeed op deepspeed_shm_comm")


def test_a_lock_left_by_a_killed_build_is_stale_and_only_then(tmp_path: Path) -> None:
    """torch's build lock is a bare file: a killed build leaves it for ever. It counts as
    stale only when old, nothing in the directory moved for as long, and nobody works there."""
    import os

    from engine.trainer import op_cache

    now = 1_000_000.0
    old = now - op_cache.STALE_LOCK_S - 5
    lock = tmp_path / op_cache.LOCK_FILE
    assert not op_cache.stale_lock(tmp_path, now, busy=lambda d: False)  # no lock at all
    lock.touch()
    (tmp_path / "shm.o").touch()
    for path in (lock, tmp_path / "shm.o"):
        os.utime(path, (old, old))
    assert op_cache.stale_lock(tmp_path, now, busy=lambda d: False)
    assert not op_cache.stale_lock(tmp_path, now, busy=lambda d: True)  # ninja still compiles there
    os.utime(tmp_path / "shm.o", (now - 1, now - 1))  # an object file just written
    assert not op_cache.stale_lock(tmp_path, now, busy=lambda d: False)
    os.utime(tmp_path / "shm.o", (old, old))
    os.utime(lock, (now - 10, now - 10))  # a build that took the lock a moment ago
    assert not op_cache.stale_lock(tmp_path, now, busy=lambda d: False)


def test_a_torch_lock_with_no_live_memtui_holder_is_removed_when_the_turn_comes(tmp_path: Path) -> None:
    """Holding our flock, a torch lock still there was left by a builder that died: removed at
    once (not after STALE_LOCK_S), unless a process works in the directory (not ours)."""
    from engine.trainer import op_cache

    lock = tmp_path / op_cache.LOCK_FILE
    lock.touch()
    alone = lambda pid: pytest.fail(f"nobody holds the turn, not {pid}")  # noqa: E731
    with op_cache.load_turn(tmp_path, waiting=alone, busy=lambda d: True):
        assert lock.exists()  # another tool's ninja compiles there: its lock stays
    with op_cache.load_turn(tmp_path, waiting=alone, busy=lambda d: False):
        assert not lock.exists()


def test_a_second_load_waits_for_the_turn_and_says_so(tmp_path: Path) -> None:
    import os

    from engine.trainer import op_cache

    order: list[str] = []
    held, release = threading.Event(), threading.Event()

    def first() -> None:
        with op_cache.load_turn(tmp_path, waiting=lambda pid: order.append(f"first waited for {pid}")):
            order.append("first loads")
            held.set()
            release.wait(30)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(30)

    def waiting(holder: int | None) -> None:
        order.append(f"second waits for {holder}")
        release.set()

    with op_cache.load_turn(tmp_path, waiting=waiting, busy=lambda d: False):
        order.append("second loads")
    thread.join(30)
    assert order == ["first loads", f"second waits for {os.getpid()}", "first done", "second loads"]


@pytest.mark.slow
def test_a_builder_killed_mid_load_leaves_nothing_the_next_load_waits_on(tmp_path: Path) -> None:
    """The holder of the turn SIGKILLed with torch's lock taken (a spare killed while it built):
    the next load gets the turn at once and the lock is gone."""
    import signal
    import sys

    from engine.trainer import op_cache

    holder = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(tmp_path / op_cache.TURN_FILE)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        f"open({str(tmp_path / op_cache.LOCK_FILE)!r}, 'x').close()\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"  # holds until killed (or its stdin closes): no timed wait
    )
    argv = [sys.executable, "-c", holder]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stdout.readline() == b"held\n"
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert (tmp_path / op_cache.LOCK_FILE).exists()  # torch's lock outlives its holder
    dead = lambda pid: pytest.fail(f"the dead holder's turn: {pid}")  # noqa: E731
    with op_cache.load_turn(tmp_path, waiting=dead, busy=lambda d: False):
        assert not (tmp_path / op_cache.LOCK_FILE).exists()


def test_a_wait_for_a_memtui_build_names_the_builders_pid() -> None:
    waiting = OpState("deepspeed_shm_comm", "/x/deepspeed_shm_comm", built=False, locked=True, holder=4321)
    ((data, message),) = phases_for(waiting)
    assert data["phase"] == "waiting_for_build" and data["holder"] == 4321
    assert message.startswith("waiting for process 4321's build of deepspeed_shm_comm (lock ")
    assert describe(waiting, 30.0).startswith("deepspeed_shm_comm: waited for process 4321's build in 30 s")
