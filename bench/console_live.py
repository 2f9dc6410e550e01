"""An attached console over a live tiny run: its CPU and memory, and the latency from a step
finishing in the trainer to its step number on the screen.

Starts ``memtui run --preset tiny --detach`` in a scratch MEMTUI_HOME, attaches
``memtui attach`` in a real pseudo-terminal, reads the terminal for ``--seconds``, then
detaches and stops the run. CPU is the console process's user+system time over the window
(percent of one core); RSS is sampled every second. Latency: for each step number drawn in
the header, wall time when it appeared minus the sample's ``ts`` in the store (same host
clock). Figures are printed, never asserted.

    python bench/console_live.py [--seconds 30]

Targets: under 3% of one core and under 100 MB RSS; median latency under 250 ms. Also the
time from ``memtui run --detach`` to the run's first stored step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.run.directory import list_runs  # noqa: E402
from engine.run.storage.store import Store  # noqa: E402

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"
ANSI_ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>]")
STEP = re.compile(rb"step (\d+)/\d+")


def start_run(home: Path) -> tuple[str, float]:
    """Start a detached tiny run; (its id, seconds from the command to its first stored step)."""
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    started = time.monotonic()
    subprocess.run(
        [MEMTUI, "run", "--preset", "tiny", "--steps", "100000", "--detach"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    run = list_runs(home)[0]
    deadline = time.monotonic() + 120
    while not (run.store.exists() and _latest_step(run.store)):
        if time.monotonic() > deadline:
            raise RuntimeError("the run never reported a step")
        time.sleep(0.05)
    return run.run_id, time.monotonic() - started


def _latest_step(store_path: Path) -> int:
    with Store(store_path, readonly=True) as store:
        latest = store.latest_step()
    return latest.step if latest else 0


def watch(
    home: Path, run_id: str, seconds: float, profile: Path | None = None
) -> tuple[dict[int, float], float, list[float]]:
    """Drive the console; returns step -> first time drawn, CPU percent, RSS samples (MB)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(MEMTUI_HOME=str(home), TERM="xterm-256color", COLUMNS="120", LINES="40")
        os.execv(MEMTUI, [MEMTUI, "attach", run_id])
    proc = psutil.Process(pid)
    drawn: dict[int, float] = {}
    rss: list[float] = []
    tail = b""
    try:
        _read_for(fd, 5.0)  # start-up is not the steady state
        spy = _profiler(pid, seconds, profile) if profile else None
        cpu0, t0, next_rss = proc.cpu_times(), time.monotonic(), 0.0
        while time.monotonic() - t0 < seconds:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                now = time.time()
                chunk = os.read(fd, 65536)
                text = ANSI_ESCAPE.sub(b"", tail + chunk)
                for match in STEP.finditer(text):
                    drawn.setdefault(int(match.group(1)), now)
                tail = chunk[-200:]
            if time.monotonic() >= next_rss:
                rss.append(proc.memory_info().rss / 2**20)
                next_rss = time.monotonic() + 1.0
        cpu1, t1 = proc.cpu_times(), time.monotonic()
        cpu = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / (t1 - t0)
        if spy is not None:
            spy.wait(timeout=30)
        os.write(fd, b"q")
        _read_for(fd, 1.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    return drawn, cpu, rss


def _profiler(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy (beside this Python) sampling the console for the measured window."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    command = [spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200", "-o", str(out)]
    return subprocess.Popen([*command, "--format", "raw"], stdout=subprocess.DEVNULL)


def _read_for(fd: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                os.read(fd, 65536)
            except OSError:
                return


def latencies(store_path: Path, drawn: dict[int, float]) -> list[float]:
    with Store(store_path, readonly=True) as store:
        ts = {s.step: s.ts for s in store.steps(since_step=min(drawn) - 1)} if drawn else {}
    return [seen - ts[step] for step, seen in drawn.items() if step in ts]


def measure(seconds: float, profile: Path | None = None) -> dict[str, float]:
    """Start a run, attach a console for ``seconds``; the figures as a dict."""
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    try:
        run_id, first_step_s = start_run(home)
        drawn, cpu, rss = watch(home, run_id, seconds, profile)
        run = list_runs(home)[0]
        lat = sorted(latencies(run.store, drawn))
    finally:
        subprocess.run([MEMTUI, "stop"], env=env, capture_output=True, timeout=120)
        for run in list_runs(home):
            pid = run.supervisor_pid()
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)
    figures = {
        "start_to_first_step_s": first_step_s,
        "cpu_percent": cpu,
        "rss_max_mb": max(rss),
        "rss_median_mb": statistics.median(rss),
        "seconds": seconds,
    }
    if lat:
        figures["latency_median_ms"] = statistics.median(lat) * 1000
        figures["latency_p90_ms"] = lat[int(0.9 * (len(lat) - 1))] * 1000
        figures["steps_drawn"] = len(lat)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--profile", type=Path, help="write py-spy's collapsed stacks of the console here")
    args = parser.parse_args()
    f = measure(args.seconds, args.profile)
    print(f"start to first step   {f['start_to_first_step_s']:5.1f} s (memtui run --detach to a stored step)")
    print(
        f"console CPU           {f['cpu_percent']:5.1f} % of one core over {args.seconds:g} s (target < 3 %)"
    )
    print(
        f"console RSS           max {f['rss_max_mb']:5.1f} MB, "
        f"median {f['rss_median_mb']:5.1f} MB (target < 100 MB)"
    )
    if "latency_median_ms" in f:
        print(
            f"step -> screen        median {f['latency_median_ms']:5.0f} ms, "
            f"p90 {f['latency_p90_ms']:5.0f} ms, "
            f"n={f['steps_drawn']:.0f} steps drawn (target median < 250 ms)"
        )


if __name__ == "__main__":
    main()
