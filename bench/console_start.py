"""How long from starting ``memtui attach`` to its first frame, in a real pseudo-terminal.

The clock starts just before fork and stops when the run id (drawn in the header of the
first frame) appears on the terminal. Two cases: a finished run opened read-only from its
store, and a live run served by the scripted engine transport (real protocol). Also ``memtui --help``.

    python bench/console_start.py [--repeat 5]

Target: under 1 s to the first frame. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config.config_file import build_run_config  # noqa: E402
from engine.run.directory import RunDir  # noqa: E402
from engine.run.storage.store import Store  # noqa: E402
from tests.fakes.run_script import make_event, make_sample  # noqa: E402
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for  # noqa: E402

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"


def fabricate(home: Path, state: str) -> RunDir:
    run = RunDir.create(build_run_config(name="bench", steps=1000), home)
    with Store(run.store) as store:
        for step in range(1, 201):
            store.add_step(make_sample(step))
        for _ in range(50):
            store.append_event("note", message="bench event")
        store.update_meta(state=state, started_at=time.time() - 60)
    return run


def time_to_first_frame(home: Path, run: RunDir, timeout: float = 10.0) -> float:
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(MEMTUI_HOME=str(home), TERM="xterm-256color", COLUMNS="100", LINES="30")
        os.execv(MEMTUI, [MEMTUI, "attach", run.run_id])
    seen = b""
    try:
        while time.perf_counter() - start < timeout:
            ready, _, _ = select.select([fd], [], [], 0.01)
            if ready:
                try:
                    seen += os.read(fd, 65536)
                except OSError:
                    break
                if run.run_id.encode() in seen:
                    return time.perf_counter() - start
        raise RuntimeError(f"no first frame within {timeout} s: {seen[-500:]!r}")
    finally:
        os.write(fd, b"q")
        time.sleep(0.3)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def time_help() -> float:
    start = time.perf_counter()
    subprocess.run([MEMTUI, "--help"], capture_output=True, check=True)
    return time.perf_counter() - start


def report(label: str, figures: list[float]) -> None:
    print(
        f"{label:<34} median {statistics.median(figures) * 1000:6.0f} ms   "
        f"min {min(figures) * 1000:6.0f} ms   max {max(figures) * 1000:6.0f} ms   (n={len(figures)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    try:
        report("memtui --help", [time_help() for _ in range(args.repeat)])
        finished = fabricate(home, "completed")
        report(
            "attach, finished run (history)",
            [time_to_first_frame(home, finished) for _ in range(args.repeat)],
        )
        live = fabricate(home, "running")
        live.pid_file.write_text(str(os.getpid()))
        events = [make_event(i) for i in range(1, 51)]
        stream = telemetry([make_sample(201)])
        with ScriptedEngine.in_thread(live.socket, welcome_for(live.run_id), events=events, stream=stream):
            report(
                "attach, live run (scripted engine)",
                [time_to_first_frame(home, live) for _ in range(args.repeat)],
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
