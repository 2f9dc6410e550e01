"""Seconds from a SIGKILL of the trainer (or, with ``--signal term``, a preemption's SIGTERM)
to its next completed step after the automatic restart, with the warm standby trainer and
without it (a cold start), and the checkpoint stall per save.

    python bench/recovery_time.py [--kills 10] [--mode both|standby|cold|warming|all]
                                  [--signal kill|term|tree] [--json PATH]

``--mode warming`` keeps a spare but kills the trainer while that spare is still warming up
(its process there, its ``standby_ready`` not yet said): the restart is handed to the
warming spare (``Standby.take``), to compare with ``cold``. ``all`` runs the three.

``--signal tree`` is a whole-tree kill, as ``memtui endure --kills`` does it: SIGKILL of the
supervisor's and the trainer's process groups, then the run brought back as ``memtui
resume`` does (in this process, as endure does); the recovery is the first step of the
resumed run's attempt. Nothing warm survives it: the spare dies with its supervisor, and
the new supervisor's first trainer starts cold (with ``restart.standby`` on, begun at the
supervisor's own start: its head start).

Each mode starts its own tiny run (checkpoint every 20 steps, the restart section's
defaults unless ``--backoff`` is given, ``restart.standby`` on or off, ``on_preemption`` on
with ``--signal term``, a spare from the first step) with ``memtui run``,
kills the trainer KILLS times (each time a few steps past the previous kill's step, not as
it saves, once a checkpoint verifies and, with the standby, once a spare is ready), and
reads the store: the recovery is the first step of the
next attempt (the trainer's own timestamp) minus the moment of the kill, and its parts are
the events between (the supervisor's ``trainer_exited``, ``trainer_restarted`` and
``trainer_launched``, the new trainer's start-up phases, its first step). The spare's idle
cost is what its ``standby_ready`` events say. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.checkpoints.store import newest_verified_step
from engine.run.directory import RunDir
from engine.run.storage.store import Store

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"
EVERY = 20  # steps between checkpoints
POLL_S = 0.02  # s between looks at the store
SETTLE_STEPS = 3  # steps an attempt makes before it is killed (and, with the standby, a spare ready)
PHASES = ("importing", "initialising", "loading_checkpoint", "first_step")  # a resuming trainer's


def config_text(standby: bool, backoff_s: float | None, preempt: bool = False) -> str:
    """The bench run's config: the restart defaults (each kill comes after progress, so the
    streak never grows past one) unless ``backoff_s`` overrides the first restart's delay;
    ``preempt``: a trainer that stops on SIGTERM is restarted. With the standby, a spare
    starts at an attempt's first step (``standby_after_s = 0``): the kills wait for it."""
    backoff = "" if backoff_s is None else f"backoff_initial_s = {backoff_s}\n"
    spare = "standby = true\nstandby_after_s = 0\n" if standby else "standby = false\n"
    return (
        f'name = "bench"\nsteps = 100000\n[checkpoint]\nevery_steps = {EVERY}\n'
        f"[restart]\n{backoff}{spare}on_preemption = {'true' if preempt else 'false'}\n"
    )


def events(run: RunDir, type_: str) -> list[dict[str, Any]]:
    with Store(run.store, readonly=True) as store:
        return [e.data for e in store.events_since(0) if e.type == type_]


def stamped(run: RunDir) -> list[tuple[float, str, dict[str, Any]]]:
    """(ts, type, data) of every event, in order."""
    with Store(run.store, readonly=True) as store:
        return [(e.ts, e.type, e.data) for e in store.events_since(0)]


def segments(run: RunDir, killed_at: float, attempt: int, stepped_at: float) -> dict[str, float]:
    """Where one recovery's seconds went, from the events that follow the kill: each mark is
    the first event of its kind after the previous mark (s between marks; a missing one is
    left out)."""
    after = [(ts, type_, data) for ts, type_, data in stamped(run) if ts >= killed_at]
    marks: list[tuple[str, float]] = [("kill", killed_at)]
    wanted: list[tuple[str, str | None]] = [
        (k, None) for k in ("trainer_exited", "trainer_restarted", "trainer_launched")
    ]
    wanted += [("startup_phase", phase) for phase in PHASES]
    at = 0
    for kind, phase in wanted:
        for index in range(at, len(after)):
            ts, type_, data = after[index]
            ours = phase is None or (data.get("phase"), data.get("attempt")) == (phase, attempt)
            if type_ == kind and ours:
                marks.append((phase or kind, ts))
                at = index + 1
                break
    marks.append(("stepped", stepped_at))
    return {f"{a}->{b}": round(tb - ta, 3) for (a, ta), (b, tb) in zip(marks, marks[1:], strict=False)}


def spare_ready(run: RunDir) -> bool:
    """A spare has said ready that has not become a trainer yet."""
    trainers = {e["pid"] for e in events(run, "trainer_launched")}
    return any(e["pid"] not in trainers for e in events(run, "standby_ready"))


def spare_warming(run: RunDir) -> bool:
    """A spare of this run is running and none has said ready: it is still importing."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "--standby" in cmdline and str(run.path) in cmdline:
            return not spare_ready(run)
    return False


def kill(run: RunDir, trainer_pid: int, how: str) -> None:
    """``how``: ``kill`` (SIGKILL of the trainer's group), ``term`` (SIGTERM, a preemption), or
    ``tree`` (a whole-tree kill, then the run resumed as ``memtui resume`` does)."""
    if how != "tree":
        os.killpg(trainer_pid, signal.SIGTERM if how == "term" else signal.SIGKILL)
        return
    from memtui.cli.runs.endurance_driver import kill_tree, look
    from memtui.cli.runs.resumption import resume_run

    kill_tree(run, look(run))
    resume_run(run, fresh=False)


def measure(
    standby: bool, kills: int, backoff_s: float | None, how: str = "kill", warming: bool = False
) -> dict[str, Any]:
    """``kills`` recoveries of one run; ``warming``: each kill while the spare still warms up."""
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    config = home / "b.toml"
    config.write_text(config_text(standby, backoff_s, preempt=how == "term"))
    out = subprocess.run(
        [MEMTUI, "run", str(config), "--detach", "--json"], env=env, capture_output=True, text=True
    )
    run = RunDir(Path(json.loads(out.stdout)["run_dir"]))
    recoveries: list[float] = []
    parts: list[dict[str, float]] = []
    load_before = os.getloadavg()  # 1, 5, 15 min: the modes run one after the other
    try:
        killed_step = -1  # the step the previous kill came after
        for attempt in range(1, kills + 1):
            first = None  # the attempt's first step: the kill comes a few steps later
            while True:
                with Store(run.store, readonly=True) as store:
                    latest, meta = store.latest_step(), store.read_meta()
                if latest is not None and latest.attempt == attempt:
                    first = latest.step if first is None else first
                    # past the replay, beyond the previous kill's step: the run was healthy again,
                    # so each kill is the first of a streak (what a restart policy is judged on)
                    start = max(first, killed_step + 1)
                    settled = latest.step >= start + SETTLE_STEPS and latest.step % EVERY > 1  # not mid-save
                    saved = newest_verified_step(run.checkpoints) is not None  # a restart loads one
                    spare = spare_warming(run) if warming else (not standby or spare_ready(run))
                    if settled and saved and spare:
                        break
                time.sleep(POLL_S)
            killed_at, killed_step = time.time(), latest.step
            assert meta.trainer_pid is not None
            kill(run, meta.trainer_pid, how)
            while True:
                with Store(run.store, readonly=True) as store:
                    latest = store.latest_step()
                if latest is not None and latest.attempt == attempt + 1:
                    recoveries.append(latest.ts - killed_at)
                    parts.append(segments(run, killed_at, attempt + 1, latest.ts))
                    break
                time.sleep(POLL_S)
            mode = "warming" if warming else "standby" if standby else "cold"
            print(f"  {mode} {how} {attempt}: {recoveries[-1]:.2f} s", flush=True)
        launches = events(run, "trainer_launched")
        spares = events(run, "standby_ready")
        lost = len(events(run, "standby_lost"))
        stalls = [e["seconds"] for e in events(run, "checkpoint_saved") if e.get("seconds") is not None]
    finally:
        subprocess.run([MEMTUI, "stop", run.run_id], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    return {
        "recoveries_s": [round(r, 3) for r in recoveries],
        "median_s": round(statistics.median(recoveries), 3),
        "median_parts_s": {
            key: round(statistics.median(p[key] for p in parts if key in p), 3)
            for key in dict.fromkeys(k for p in parts for k in p)
        },
        "warm_restarts": sum(1 for e in launches if e.get("standby")),
        "spares_lost": lost,
        "spare": _spare_cost(spares),
        "median_checkpoint_stall_s": round(statistics.median(stalls), 4) if stalls else None,  # timed saves
        "loadavg": {"before": load_before, "after": os.getloadavg()},
    }


def _spare_cost(ready: list[dict[str, Any]]) -> dict[str, float] | None:
    """Medians over every spare of the run: resident MiB, idle % of a core, warm-up s."""
    if not ready:
        return None
    return {
        key: round(statistics.median(e[key] for e in ready), 2)
        for key in ("rss_mib", "idle_cpu_percent", "warmup_s")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs per mode (default 10)")
    parser.add_argument("--mode", choices=("both", "standby", "cold", "warming", "all"), default="both")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--signal",
        choices=("kill", "term", "tree"),
        default="kill",
        help="SIGKILL, SIGTERM as a preemption, or a whole-tree kill and resume",
    )
    parser.add_argument(
        "--backoff", type=float, metavar="S", help="restart.backoff_initial_s (default: the config's default)"
    )
    args = parser.parse_args()
    modes = {
        "standby": ["standby"],
        "cold": ["cold"],
        "warming": ["warming"],
        "both": ["standby", "cold"],
        "all": ["standby", "warming", "cold"],
    }[args.mode]
    result: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "cores": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "kills": args.kills,
        "preset": "tiny",
        "restart_backoff_s": "default" if args.backoff is None else args.backoff,
        "signal": args.signal,
    }
    for mode in modes:
        standby = mode != "cold"
        result[mode] = measure(standby, args.kills, args.backoff, args.signal, warming=mode == "warming")
    result["loadavg_after"] = os.getloadavg()
    for name in ("standby", "warming", "cold"):
        if name in result:
            figures = result[name]
            median, each = figures["median_s"], figures["recoveries_s"]
            print(f"{name}: {args.signal} -> next step, median {median:.2f} s of {each}")
            print(f"  median of each part: {figures['median_parts_s']}")
            if figures["spare"]:
                print(f"  spare while idle: {figures['spare']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
