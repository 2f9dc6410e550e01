"""Seconds from a SIGKILL of the trainer to its next step while the planner endpoint trickles.

``python bench/planner_trickle.py [--samples 5] [--cap-s 120] [--timeout-s S] [--every-steps N]``

Each sample runs a real supervisor in this process (``engine.supervisor.daemon``) with the
fake trainer (tests/fakes/fake_trainer.py, 100 steps/s) and ``policy.planner = "openai"``
pointing at an endpoint on 127.0.0.1 that sends its headers and then one byte every 0.2 s,
forever (tests/fakes/trickle_endpoint.py), asked every ``--every-steps`` steps with a
deadline of ``--timeout-s`` (both default to the run config's defaults, as does every other
setting: the restart backoff included). After a warm-up long enough for a planner that
holds a worker thread per ask to fill the loop's default executor (``min(32, CPUs + 4)`` workers, one ask per
timeout + 1 s, plus 2 s), the trainer is SIGKILLed; the figure is the time from the kill
to the first step the restarted trainer reports (its own timestamp). A sample still
waiting after ``--cap-s`` is reported as null (over the cap). Then the endpoint drops its
connections and the run is stopped. Prints one JSON object: every sample, the median
(``"> CAP s"`` when the median sample ran over the cap) and the setup. Uses only what the
supervisor had before the planner's deadline work, so it measures old and new code alike.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.config.config_file import build_run_config  # noqa: E402
from engine.config.run_config import PolicyConfig  # noqa: E402
from engine.run.directory import RunDir  # noqa: E402
from engine.supervisor.daemon import Supervisor  # noqa: E402
from tests.fakes.trickle_endpoint import TrickleEndpoint  # noqa: E402

FAKE_TRAINER = ROOT / "tests" / "fakes" / "fake_trainer.py"
RATE_HZ = 100  # fake trainer steps per second
TRICKLE_INTERVAL_S = 0.2  # s between two body bytes: shorter than any per-read timeout
POLL_S = 0.02  # s between looks at the newest step


def default_workers() -> int:
    """The size of asyncio's default executor (ThreadPoolExecutor's default)."""
    return min(32, (os.cpu_count() or 1) + 4)


async def one_sample(timeout_s: float, every_steps: int, warmup_s: float, cap_s: float) -> dict[str, Any]:
    """One kill; the seconds to the restarted trainer's first step (None: over ``cap_s``)."""
    home = Path(tempfile.mkdtemp(prefix="mtpt", dir="/tmp"))
    async with TrickleEndpoint(interval_s=TRICKLE_INTERVAL_S, max_bytes=10**6) as endpoint:
        policy = {
            "planner": "openai",
            "planner_url": endpoint.url,
            "planner_model": "trickle",
            "planner_timeout_s": timeout_s,
            "planner_every_steps": every_steps,
        }
        config = build_run_config({"steps": 10**6, "policy": policy})
        run = RunDir.create(config, home=home)
        supervisor = Supervisor(run, [sys.executable, str(FAKE_TRAINER)], config=config)
        task = asyncio.ensure_future(supervisor.serve())
        try:
            await asyncio.wait_for(supervisor.serving.wait(), 60)
            started = time.monotonic()
            while supervisor.latest is None or time.monotonic() - started < warmup_s:
                await asyncio.sleep(POLL_S)
            asks_before_kill = endpoint.connections
            pid = supervisor.attempts.pid
            assert pid is not None, "no trainer to kill"
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            seconds: float | None = None
            while time.time() - killed_at < cap_s:
                latest = supervisor.latest
                if latest is not None and latest.attempt >= 2:
                    seconds = latest.ts - killed_at
                    break
                await asyncio.sleep(POLL_S)
            return {"seconds": seconds, "asks_before_kill": asks_before_kill, "asks": endpoint.connections}
        finally:
            supervisor.request_stop("bench done")
            await endpoint.close()  # a thread stuck reading the trickle gets its EOF
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), 30)
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--cap-s", type=float, default=120.0, help="s a sample waits for the restart")
    defaults = PolicyConfig()
    parser.add_argument(
        "--timeout-s", type=float, default=defaults.planner_timeout_s, help="policy.planner_timeout_s"
    )
    parser.add_argument(
        "--every-steps", type=int, default=defaults.planner_every_steps, help="policy.planner_every_steps"
    )
    parser.add_argument("--warmup-s", type=float, default=None, help="s of training before the kill")
    args = parser.parse_args()
    os.environ.update({"FAKE_TRAINER_RATE_HZ": str(RATE_HZ), "FAKE_TRAINER_STEPS": str(10**6)})
    warmup_s = (
        args.warmup_s if args.warmup_s is not None else (default_workers() + 1) * (args.timeout_s + 1) + 2
    )
    samples = [
        asyncio.run(one_sample(args.timeout_s, args.every_steps, warmup_s, args.cap_s))
        for _ in range(args.samples)
    ]
    seconds = [s["seconds"] for s in samples]
    median = statistics.median(math.inf if s is None else s for s in seconds)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(
        json.dumps(
            {
                "what": "s from a trainer SIGKILL to its next step, the planner endpoint trickling",
                "commit": commit,
                "samples_s": [None if s is None else round(s, 2) for s in seconds],
                "median_s": f"> {args.cap_s:g} s" if math.isinf(median) else round(median, 2),
                "cap_s": args.cap_s,
                "asks_before_kill": [s["asks_before_kill"] for s in samples],
                "planner_timeout_s": args.timeout_s,
                "planner_every_steps": args.every_steps,
                "trickle_interval_s": TRICKLE_INTERVAL_S,
                "warmup_s": warmup_s,
                "default_executor_workers": default_workers(),
            }
        )
    )


if __name__ == "__main__":
    main()
