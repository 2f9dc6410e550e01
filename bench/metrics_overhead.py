"""The supervisor's CPU time with ``[metrics] port`` on (scraped every second) against off.

Each round starts a real run through the real CLI (``memtui run --detach``) with the
torch-free fake trainer at a fixed step rate, waits for its first steps, then reads the
supervisor's CPU time (user + system, ``/proc/PID/stat``: its own threads, the metrics
server's included, not its children's) over the same wall-clock window; with metrics on, a
scraper GETs ``/metrics`` every ``--scrape-s`` meanwhile. Off and on alternate (off on, on
off, off on, ...) so drift in the shared machine hits both alike. Prints and (``--json``)
writes each round and the medians: CPU seconds per window, steps in it, scrapes, and the
extra CPU per scrape.

    python bench/metrics_overhead.py [--pairs 4] [--window-s 15] [--rate-hz 50] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from engine.run.directory import RunDir
from engine.run.reports.status import offline_status

CHECKOUT = Path(__file__).resolve().parents[1]
FAKE_TRAINER = CHECKOUT / "tests" / "fakes" / "fake_trainer.py"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4, help="off/on pairs (default 4)")
    parser.add_argument(
        "--window-s", type=float, default=15.0, help="measured seconds per round (default 15)"
    )
    parser.add_argument("--warmup-s", type=float, default=2.0, help="unmeasured seconds after the first step")
    parser.add_argument(
        "--rate-hz", type=float, default=50.0, help="fake trainer steps per second (default 50)"
    )
    parser.add_argument("--scrape-s", type=float, default=1.0, help="seconds between scrapes (default 1)")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    return parser.parse_args()


def cli(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "MEMTUI_HOME": str(home), "PYTHONPATH": str(CHECKOUT), **(env or {})}
    command = [sys.executable, "-m", "memtui.cli", *args]
    return subprocess.run(command, env=full, capture_output=True, text=True, timeout=120, check=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime: fields 14, 15


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


class Scraper(threading.Thread):
    """GET /metrics every ``every_s`` until stopped; counts the scrapes that answered 200."""

    def __init__(self, port: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.every_s = f"http://127.0.0.1:{port}/metrics", every_s
        self.stopped, self.scrapes, self.bytes = threading.Event(), 0, 0

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            with urllib.request.urlopen(self.url, timeout=10) as answer:
                self.bytes = len(answer.read())
                self.scrapes += answer.status == 200


def one_round(home: Path, on: bool, args: argparse.Namespace, index: int) -> dict[str, Any]:
    port = free_port()
    setting = ["--set", f"metrics.port={port}"] if on else []
    env = {
        "MEMTUI_TRAINER_CMD": f"{sys.executable} {FAKE_TRAINER}",
        "FAKE_TRAINER_STEPS": "100000000",
        "FAKE_TRAINER_RATE_HZ": str(args.rate_hz),
    }
    started = cli(
        home, "run", "--name", f"mo{index}", "--steps", "100000000", *setting, "--detach", "--json", env=env
    )
    run = RunDir(Path(json.loads(started.stdout)["run_dir"]))
    wait(lambda: offline_status(run).step > 0, "the first step")
    pid = run.supervisor_pid()
    assert pid is not None
    time.sleep(args.warmup_s)
    scraper = Scraper(port, args.scrape_s) if on else None
    step0, cpu0, wall0 = offline_status(run).step, cpu_seconds(pid), time.monotonic()
    if scraper is not None:
        scraper.start()
    time.sleep(args.window_s)  # a bench measures a fixed window; tests never sleep
    cpu1, wall1, step1 = cpu_seconds(pid), time.monotonic(), offline_status(run).step
    if scraper is not None:
        scraper.stopped.set()
        scraper.join()
    cli(home, "stop", run.run_id)
    wait(lambda: run.supervisor_pid() is None, "the supervisor's exit")
    return {
        "metrics": "on" if on else "off",
        "cpu_s": round(cpu1 - cpu0, 3),
        "wall_s": round(wall1 - wall0, 3),
        "steps": step1 - step0,
        "scrapes": scraper.scrapes if scraper else 0,
        "scrape_bytes": scraper.bytes if scraper else 0,
    }


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    off = [r["cpu_s"] for r in rounds if r["metrics"] == "off"]
    on = [r["cpu_s"] for r in rounds if r["metrics"] == "on"]
    scrapes = [r["scrapes"] for r in rounds if r["metrics"] == "on"]
    extra = statistics.median(on) - statistics.median(off)
    return {
        "median_cpu_s_off": statistics.median(off),
        "median_cpu_s_on": statistics.median(on),
        "median_ratio_on_off": round(statistics.median(on) / statistics.median(off), 3),
        "extra_cpu_ms_per_scrape": round(1000 * extra / statistics.median(scrapes), 2),
        "median_steps_off": statistics.median(r["steps"] for r in rounds if r["metrics"] == "off"),
        "median_steps_on": statistics.median(r["steps"] for r in rounds if r["metrics"] == "on"),
    }


def main() -> int:
    args = parse_args()
    home = Path(tempfile.mkdtemp(prefix="mtmo", dir="/tmp"))  # short: socket paths fit
    rounds: list[dict[str, Any]] = []
    try:
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            for on in order:
                rounds.append(one_round(home, on, args, len(rounds)))
                print(json.dumps(rounds[-1]), flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result = {
        "bench": "metrics_overhead",
        "command": " ".join(["python", "bench/metrics_overhead.py", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "rounds": rounds,
        "summary": summary(rounds),
    }
    print(json.dumps(result["summary"], indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
