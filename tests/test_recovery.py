"""Recovery end to end: a real supervisor restarting a real DeepSpeed trainer after SIGKILLs,
and ``memtui resume`` after the whole process tree was killed.

Tiny model, a checkpoint every 5 steps, short backoff; a chaos pause inside each save
(MEMTUI_CHAOS_SLOW_SAVE_S) widens the window so that some kills land mid-save.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_harness import memtui, throwaway_home

from engine.checkpoints.catalog import committed_tags, staging_tags
from engine.checkpoints.store import SLOW_SAVE_ENV, newest_verified_step
from engine.run.directory import RunDir, pid_alive
from engine.run.meta import RunMeta
from engine.run.storage.store import Store
from tests.waiting import wait_for

pytestmark = [pytest.mark.deepspeed, pytest.mark.e2e]

CONFIG = {
    "name": "crash",
    "checkpoint": {"every_steps": 5, "keep": 3},
    "restart": {"max_restarts": 20, "backoff_initial_s": 0.1, "backoff_max_s": 0.5},
}


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtr")


def start(home: Path, steps: int, slow_save_s: float = 0.0) -> RunDir:
    """``memtui run CONFIG --detach`` with the chaos pause in its environment."""
    ck, rs = CONFIG["checkpoint"], CONFIG["restart"]
    config = home / "crash.toml"
    config.write_text(
        f'name = "crash"\nsteps = {steps}\n'
        f"[checkpoint]\nevery_steps = {ck['every_steps']}\nkeep = {ck['keep']}\n"
        f"[restart]\nmax_restarts = {rs['max_restarts']}\nbackoff_initial_s = {rs['backoff_initial_s']}\n"
        f"backoff_max_s = {rs['backoff_max_s']}\n"
    )
    done = memtui(home, "run", str(config), "--detach", "--json", env={SLOW_SAVE_ENV: str(slow_save_s)})
    assert done.returncode == 0, done.stderr
    return RunDir(Path(json.loads(done.stdout)["run_dir"]))


def meta(run: RunDir) -> RunMeta:
    try:
        with Store(run.store, readonly=True) as store:
            return store.read_meta()
    except Exception:
        return RunMeta()


def events(run: RunDir, type: str | None = None) -> list[Any]:
    with Store(run.store, readonly=True) as store:
        return [e for e in store.events_since(0) if type is None or e.type == type]


def steps(run: RunDir) -> list[tuple[int, int]]:
    """(attempt, step) of every stored sample, in arrival order."""
    with Store(run.store, readonly=True) as store:
        return [(s.attempt, s.step) for s in store.steps()]


def run_processes(run: RunDir) -> set[int]:
    """Pids of live processes working in the run directory (the trainers run there)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if Path(os.readlink(entry / "cwd")) == run.path.resolve() and pid_alive(int(entry.name)):
                found.add(int(entry.name))
    return found


def trainer_running(run: RunDir, attempt: int) -> int | None:
    """The trainer pid once attempt ``attempt`` has started training."""
    started = [e for e in events(run, "trainer_started") if e.attempt == attempt]
    now = meta(run)
    return now.trainer_pid if started and now.trainer_pid and now.attempt == attempt else None


def test_sigkill_at_random_moments_never_loses_more_than_the_last_checkpoint(home: Path) -> None:
    rng = random.Random(5)
    run = start(home, steps=60, slow_save_s=0.2)
    kills = []
    for attempt in range(1, 6):
        pid = wait_for(lambda a=attempt: trainer_running(run, a), what=f"attempt {attempt} to train")
        if attempt % 2:  # mid-save: the staging dir exists
            wait_for(
                lambda: staging_tags(run.checkpoints), timeout=30, what="a save in progress", every_s=0.01
            )
        else:
            time.sleep(rng.uniform(0.1, 0.8))  # chaos, not a wait: the kill lands at a random moment
        os.killpg(pid, signal.SIGKILL)
        wait_for(lambda p=pid: not pid_alive(p), timeout=30, what="the trainer to die")
        expected = newest_verified_step(run.checkpoints, "full") or 0
        kills.append((attempt, expected, bool(staging_tags(run.checkpoints))))
    wait_for(
        lambda: meta(run).state in ("completed", "failed"),
        timeout=180,
        what="the run to end",
        seen=lambda: meta(run),
    )

    assert meta(run).state == "completed" and meta(run).restarts == 5
    assert any(mid_save for _, _, mid_save in kills), kills
    loaded = {e.attempt: e.data["step"] for e in events(run, "checkpoint_loaded")}
    first_step = {}
    for attempt, step in steps(run):
        first_step.setdefault(attempt, step)
    for attempt, expected, _ in kills:
        # The next attempt resumed from the newest checkpoint that verified after the kill...
        assert loaded.get(attempt + 1, 0) == expected, (attempt, kills, loaded)
        # ...and its steps went on from there: never further back, never a gap.
        assert first_step[attempt + 1] == expected + 1, (attempt, first_step)
    restarted = events(run, "trainer_restarted")
    assert len(restarted) == 5 and all(e.data["cause"] == "killed by SIGKILL" for e in restarted)
    assert [e.data["candidate_step"] or 0 for e in restarted] == [expected for _, expected, _ in kills]
    resumed = events(run, "trainer_resumed")  # the truth, once each new trainer had loaded
    assert [e.data["resume_step"] for e in resumed] == [expected for _, expected, _ in kills]
    assert all(e.data["steps_lost"] == e.data["last_step"] - e.data["resume_step"] >= 0 for e in resumed)
    assert [e.attempt for e in resumed] == [attempt + 1 for attempt, _, _ in kills]
    # Only the saves a kill cut short were passed over; no committed tag ever failed to verify.
    rejected = events(run, "checkpoint_rejected")
    assert all(e.data["tag"].endswith(".staging") for e in rejected)
    assert len(rejected) == sum(mid_save for _, _, mid_save in kills)
    final = [s for a, s in steps(run) if a == 6]
    assert final[-1] == 60 and final == list(range(first_step[6], 61))


def test_kill_the_whole_tree_then_memtui_resume(home: Path) -> None:
    run = start(home, steps=100_000)
    pid = wait_for(lambda: trainer_running(run, 1), what="the trainer")
    wait_for(lambda: (newest_verified_step(run.checkpoints) or 0) >= 10, what="two checkpoints")
    supervisor = run.supervisor_pid()
    assert supervisor is not None
    os.killpg(supervisor, signal.SIGKILL)  # power loss: no ending recorded
    # Every trainer of the run, not only ``pid``: the supervisor may have restarted it since,
    # and a trainer that outlives its supervisor stops with an emergency checkpoint.
    victims = run_processes(run) | {pid}
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim, signal.SIGKILL)
    wait_for(
        lambda: not any(map(pid_alive, victims | {supervisor})), timeout=30, what="the whole tree to die"
    )
    assert not run_processes(run)
    before = steps(run)
    newest = newest_verified_step(run.checkpoints, "full")
    assert newest is not None and before

    listed = json.loads(memtui(home, "ls", "--json").stdout)
    assert [(r["run_id"], r["state"]) for r in listed] == [(run.run_id, "interrupted")]
    rows = json.loads(memtui(home, "checkpoints", run.run_id, "--json").stdout)
    # (``latest`` may still name the one before: a kill can land between the rename and it.)
    # A trainer that saw its supervisor go may have begun an emergency save that its own kill
    # cut short: that staging dir is listed above, as what it is, never as a checkpoint.
    verified = [r for r in rows if r["state"] == "verified"]
    assert verified[0]["step"] == newest, rows
    above = rows[: rows.index(verified[0])]
    assert all(r["state"] == "staging" and r["step"] > newest for r in above), rows

    resumed = memtui(home, "resume", run.run_id, "--detach", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["from_step"] == newest
    wait_for(lambda: any(a == 2 for a, _ in steps(run)), what="the resumed trainer's first step")
    after = steps(run)
    assert after[: len(before)] == before  # the earlier telemetry is all still there
    assert [s for a, s in after if a == 2][0] == newest + 1
    assert events(run, "checkpoint_loaded")[-1].data["step"] == newest
    # What the power loss cost, said by the new supervisor: from the newest stored step (the
    # killed supervisor may not have stored the last few; the checkpoint can be newer).
    # A trainer that saw its supervisor go before its own kill spooled its last reports:
    # the newest step of attempt 1 is what the store holds after the resume took them in.
    resumed_at = events(run, "trainer_resumed")[-1].data
    assert resumed_at["resume_step"] == newest
    assert resumed_at["steps_lost"] == max(0, max(s for a, s in after if a == 1) - newest)
    again = memtui(home, "resume", run.run_id, "--detach")  # live: nothing to start
    assert again.returncode == 0 and f"{run.run_id} already served by pid" in again.stdout, again.stderr
    stopped = memtui(home, "stop", run.run_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def corrupt_largest_file(tag: Path) -> Path:
    """Flip bytes in the middle of ``tag``'s largest file; its size stays the same."""
    largest = max((p for p in tag.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with open(largest, "r+b") as f:
        f.seek(largest.stat().st_size // 2)
        chunk = f.read(64)
        f.seek(largest.stat().st_size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))
    return largest


def test_a_restart_reports_the_checkpoint_it_really_resumed_from(home: Path) -> None:
    """The newest checkpoint is corrupted with its size unchanged, then the trainer killed: the
    restart is announced with that candidate, the trainer rejects it and loads the one before,
    and ``trainer_resumed`` says so with the steps really lost."""
    run = start(home, steps=100000)
    wait_for(lambda: len(committed_tags(run.checkpoints)) >= 2, what="two checkpoints")
    assert memtui(home, "pause", run.run_id).returncode == 0  # no save between corrupting and killing
    wait_for(lambda: meta(run).state == "paused", what="the trainer to hold")
    (older, _), (newest, tag) = committed_tags(run.checkpoints)[-2:]
    corrupt_largest_file(run.checkpoints / tag)
    pid = meta(run).trainer_pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)

    resumed = wait_for(lambda: events(run, "trainer_resumed"), timeout=120, what="the resumed attempt")[0]
    restarted = events(run, "trainer_restarted")[0]
    assert restarted.data["candidate_step"] == newest  # what the supervisor could know: files look complete
    assert resumed.data["candidate_step"] == newest and resumed.data["resume_step"] == older
    assert resumed.data["steps_lost"] == restarted.data["last_step"] - older > 0
    assert any(s.startswith(tag) for s in resumed.data["skipped"]) and resumed.severity == "warning"
    assert memtui(home, "stop", run.run_id).returncode == 0
