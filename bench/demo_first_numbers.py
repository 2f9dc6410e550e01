"""A newcomer's first seconds: README's demo command (``memtui`` with no run) typed into a real
terminal (tmux), timed from Enter to the console on screen and to its first live step.

    python bench/demo_first_numbers.py [--rounds N] [--cold] [--json PATH]

Each round starts ``memtui`` in a fresh ``MEMTUI_HOME`` in a detached 80x24 tmux session,
reads the screen (``capture-pane``) every 0.1 s, and records when the console's header first
shows (the run's id) and when it first shows ``step N`` with N > 0; then stops the run.
``--cold`` points ``TORCH_EXTENSIONS_DIR`` at an emptied directory each round (a fresh
environment's op cache). The install (``pip``) is not timed: run it once before. Run it on a
quiet machine and give the load with the figures (recorded per round).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

TIMEOUT_S = 300.0
STEP = re.compile(r"\bstep (\d+)")


def screen(session: str) -> str:
    done = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True)
    return done.stdout


def one_round(cold: bool) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="mtfn", dir="/tmp"))
    env = {"MEMTUI_HOME": str(home)}
    if cold:
        env["TORCH_EXTENSIONS_DIR"] = str(home / "ext")  # empty: nothing built yet
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    session = f"mtfn{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24"], check=True)
    load = os.getloadavg()[0]
    try:
        began = time.monotonic()
        memtui = shutil.which("memtui")  # this environment's: tmux's shell has its own PATH
        subprocess.run(["tmux", "send-keys", "-t", session, f"env {exports} {memtui}", "Enter"], check=True)
        console = numbers = None
        while numbers is None and time.monotonic() - began < TIMEOUT_S:
            text = screen(session)
            if console is None and "demo-" in text:
                console = time.monotonic() - began
            found = STEP.search(text)
            if console is not None and found and int(found.group(1)) > 0:
                numbers = time.monotonic() - began
            time.sleep(0.1)
        return {"to_console_s": console, "to_first_step_s": numbers, "load1": round(load, 2), "cold": cold}
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        subprocess.run(["memtui", "stop", "--all"], env={**os.environ, **env}, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="an emptied op cache each round")
    parser.add_argument("--json", type=Path, default=None, help="also write the rounds here")
    args = parser.parse_args()
    rounds = [one_round(args.cold) for _ in range(args.rounds)]
    for n, r in enumerate(rounds, 1):
        console, first = r["to_console_s"], r["to_first_step_s"]
        print(f"round {n}: console {console} s, first step {first} s, load {r['load1']}")
    if args.json:
        document = {"date": time.strftime("%Y-%m-%d"), "rounds": rounds}
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
