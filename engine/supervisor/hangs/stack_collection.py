"""Every rank's Python stacks, collected from a quiet trainer without ending it.

Each rank's faulthandler writes its stacks to its own live file (``engine.run.stack_files``)
on ``STACK_DUMP_SIGNAL``. A stopped process (SIGSTOP, a debugger) cannot run the handler: its
signal waits until it is continued. So the collection goes in two rounds: first every
running rank is signalled and its dump awaited (its stack shows where it waits, e.g. in the
collective the stopped rank never joined); then each stopped rank is signalled, continued
just long enough for its dump, and stopped again, so that a collection (at the heartbeat
alert) leaves the trainer as it found it and only the hang recovery decides to kill. The
new part of each live file is copied to ``stacks/<UTC time>-rank<R>.txt``. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from engine.domain import STACK_DUMP_SIGNAL
from engine.events import StacksCollected
from engine.run.stack_files import diagnosis_files, innermost_frame, live_stack_files, stack_record

STACKS_WAIT_S = 3.0  # s each round waits for its dumps (a dump takes milliseconds)
STACKS_POLL_S = 0.05
CONTINUED_POLL_S = 0.002  # s: a continued rank runs (and may step) until stopped again: keep it short
STACK_MARK = "most recent call first"  # in faulthandler's header of each thread's stack


async def collect_stacks(
    run_path: Path, attempt: int, pids: list[int], rule: str, wait_s: float = STACKS_WAIT_S
) -> StacksCollected:
    """Ask each of ``pids`` (the ranks' processes) for its stacks; keep one file per rank."""
    lives = {pid: live for pid, live in live_stack_files(run_path, attempt).items() if pid in pids}
    offsets = {pid: _size(path) for pid, (_rank, path) in lives.items()}
    stopped = [pid for pid in pids if is_stopped(pid)]
    running = [pid for pid in pids if pid not in stopped]
    _signal(running, signal.Signals[STACK_DUMP_SIGNAL])
    dumps = await _await_dumps(lives, offsets, running, wait_s)
    _signal(stopped, signal.Signals[STACK_DUMP_SIGNAL])  # pending until continued
    _signal(stopped, signal.SIGCONT)
    dumps |= await _await_dumps(lives, offsets, stopped, wait_s, CONTINUED_POLL_S)
    _signal(stopped, signal.SIGSTOP)  # as it was found: a collection ends nothing
    now, files, where = time.time(), {}, {}
    for pid, text in sorted(dumps.items(), key=lambda item: lives[item[0]][0]):
        rank = lives[pid][0]
        record = stack_record(run_path, now, rank)
        record.write_text(text)
        files[str(rank)] = os.path.relpath(record, run_path)
        where[str(rank)] = innermost_frame(text) or "no frame of the training code"
    return StacksCollected(
        attempt=attempt,
        rule=rule,
        files=files,
        where=where,
        stopped=sorted(lives[p][0] for p in stopped if p in lives),
        silent=sorted(rank for pid, (rank, _path) in lives.items() if pid not in dumps),
        flight=[os.path.relpath(p, run_path) for p in diagnosis_files(run_path) if p.parent.name == "flight"],
    )


def is_stopped(pid: int) -> bool:
    """The process is stopped (state T: SIGSTOP; t: traced). False if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def _await_dumps(
    lives: dict[int, tuple[int, Path]],
    offsets: dict[int, int],
    pids: list[int],
    wait_s: float,
    poll_s: float = STACKS_POLL_S,
) -> dict[int, str]:
    """pid -> its new dump, for those of ``pids`` whose dump is complete within ``wait_s``
    (its header is there and the file stopped growing for one poll)."""
    waiting = [pid for pid in pids if pid in lives]
    seen: dict[int, str] = {}
    done: dict[int, str] = {}
    deadline = time.monotonic() + wait_s
    while waiting and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        for pid in list(waiting):
            text = _read_from(lives[pid][1], offsets[pid])
            if STACK_MARK in text and seen.get(pid) == text:
                done[pid] = text
                waiting.remove(pid)
            seen[pid] = text
    return done


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""
