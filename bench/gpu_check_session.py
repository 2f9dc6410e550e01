"""The state of one ``bench/gpu_check.py`` session: its output folder, log, child environment,
overall deadline and the summary it writes. Standard library only (it runs before the
wheelhouse is installed)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from subprocess import PIPE
from typing import Any

SUMMARY = "gpu_check.json"
LOG = "gpu_check.log"
MARGIN_S = 5.0
"""Seconds of the overall deadline no command is started in (the summary is written in them)."""


class StageFailed(Exception):
    """A stage that ran and found something wrong; ``figures`` holds what it measured first."""

    def __init__(self, reason: str, figures: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.figures = figures or {}


class StageSkipped(Exception):
    """A stage that cannot run here, with the reason (e.g. "no CUDA")."""


class Check:
    """One session: where its files go, the environment its children get, its deadline."""

    def __init__(self, args: argparse.Namespace, out: Path, repo: Path) -> None:
        self.args = args
        self.cpu: bool = args.cpu
        self.quick: bool = args.quick
        self.out = out
        self.repo = repo
        self.started_at = time.time()
        self.deadline = time.monotonic() + args.deadline_s
        self.stage_end: float | None = None
        """When the running stage's cap ends (``--quick``); None: only the deadline bounds it."""
        # MEMTUI_HOME short: a run's socket path must fit in 107 bytes
        self.home = Path(tempfile.mkdtemp(prefix="gc", dir="/tmp"))
        self.records: list[dict[str, Any]] = []
        self._log = (out / LOG).open("a", encoding="utf-8")
        self.env = self._child_env()

    def _child_env(self) -> dict[str, str]:
        env = {**os.environ, "MEMTUI_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        if self.cpu:
            env["CUDA_VISIBLE_DEVICES"] = ""  # --cpu on a GPU host too: torch sees no device
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.repo), env.get("PYTHONPATH", "")) if p)
        return env

    def add_site(self, site: Path) -> None:
        """Installed wheels go after the checkout (its code wins) and before the rest."""
        parts = self.env["PYTHONPATH"].split(os.pathsep)
        self.env["PYTHONPATH"] = os.pathsep.join([parts[0], str(site), *parts[1:]])

    def remaining(self) -> float:
        """Seconds left to the sooner of the deadline and the running stage's cap."""
        end = self.deadline if self.stage_end is None else min(self.deadline, self.stage_end)
        return end - time.monotonic()

    def log(self, line: str) -> None:
        print(line, flush=True)
        self._log.write(line + "\n")
        self._log.flush()

    def command(self, argv: list[str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the checkout with the children's environment, output to the log;
        at most ``timeout`` seconds and never past the overall deadline."""
        limit = min(timeout, self.remaining() - MARGIN_S)
        if limit <= 0:
            raise StageFailed(
                f"{what}: no time left under the overall deadline ({self.args.deadline_s:.0f} s)"
            )
        self._log.write(f"$ {' '.join(argv)}\n")
        self._log.flush()
        # its own process group: on a timeout the command and whatever it started go together
        with subprocess.Popen(
            argv, cwd=self.repo, env=self.env, stdout=PIPE, stderr=PIPE, text=True, start_new_session=True
        ) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
                self._log.write(stdout + stderr + "\n")
                raise StageFailed(f"{what} timed out after {limit:.0f} s") from None
        done = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
        self._log.write(done.stdout + done.stderr + f"[exit {done.returncode}]\n")
        self._log.flush()
        return done

    def checked(self, argv: list[str], timeout: float, what: str) -> str:
        """``command``, failing the stage on a non-zero exit with the last line of its stderr."""
        done = self.command(argv, timeout, what)
        if done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
            raise StageFailed(f"{what} exited {done.returncode}: {tail[0][:300]}")
        return done.stdout

    def python(self, *args: str) -> list[str]:
        return [sys.executable, *args]

    def memtui(self, *args: str) -> list[str]:
        return self.python("-m", "memtui.cli", *args)

    def memtui_json(self, *args: str, timeout: float = 60.0) -> Any:
        """``memtui ARGS --json`` parsed; the stage fails when it is not one JSON document."""
        what = f"memtui {args[0]}"
        done = self.command(self.memtui(*args, "--json"), timeout, what)
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
            raise StageFailed(f"{what}: no JSON (exit {done.returncode}): {tail[0][:300]}") from None

    def begin(self, name: str) -> dict[str, Any]:
        record: dict[str, Any] = {"name": name, "status": "running", "reason": None, "duration_s": 0.0}
        record["figures"] = {}
        self.records.append(record)
        self.log(f"== {name}")
        return record

    def summary(self) -> dict[str, Any]:
        failed = next((r for r in self.records if r["status"] == "failed"), None)
        return {
            "mode": "cpu" if self.cpu else "cuda",
            "quick": self.quick,
            "host": platform.node(),
            "python": platform.python_version(),
            "started_at": self.started_at,
            "deadline_s": self.args.deadline_s,
            "elapsed_s": round(time.time() - self.started_at, 2),
            "ok": failed is None and all(r["status"] != "running" for r in self.records),
            "first_failure": f"{failed['name']}: {failed['reason']}" if failed else None,
            "stages": self.records,
        }

    def write_summary(self) -> dict[str, Any]:
        """The summary so far, written whole (a killed check still leaves the stages it ran)."""
        summary = self.summary()
        path = self.out / SUMMARY
        path.with_suffix(".tmp").write_text(json.dumps(summary, indent=1, default=str))
        path.with_suffix(".tmp").replace(path)
        return summary

    def close(self) -> None:
        self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)
