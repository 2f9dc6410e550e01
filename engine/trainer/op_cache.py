"""DeepSpeed's just-in-time ops in torch's extension cache: which ones a trainer needs, whether
each is built, being built by another process, or to be built; and building them ahead.

On the CPU, ``deepspeed.initialize`` creates its torch backend, which loads the shared-memory
communication op (``deepspeed_shm_comm``, C++) with ``torch.utils.cpp_extension.load``: the
first time on a machine that compiles it with ninja (tens of seconds to minutes, about 1.5 GB
of compiler memory) into ``TORCH_EXTENSIONS_DIR/<op>/`` (default
``~/.cache/torch_extensions/py<ver>_<accel>/<op>/``), where every later run finds
``<op>.so``. A process that finds torch's ``lock`` file there waits until its builder is done.
``prepare_ops`` loads each needed op before ``deepspeed.initialize`` does (DeepSpeed's
builders keep what they loaded, so initialise finds it loaded), saying first whether it
builds or waits: the trainer's ``building_op`` and ``waiting_for_build`` phases.

``python -m engine.trainer.op_cache [--json]`` builds them ahead (``memtui prepare``).
Imports torch and DeepSpeed (in the trainer, or in this module's own process).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SHM_COMM = "ShareMemCommBuilder"
"""The op builder DeepSpeed's torch backend loads on the CPU (``deepspeed/comm/torch.py``)."""
LOCK_FILE = "lock"
LOCK_POLL_S = 0.5
"""s between two looks at the lock while an op that was not built loads."""
STALE_LOCK_S = 120.0
"""A build lock older than this, with no process at work in the build directory, was left by a
build that was killed (torch's lock is a bare file: nothing removes it then, and every later
process would wait on it for ever)."""
BUILD_TOOLS = frozenset(
    {"ninja", "c++", "g++", "gcc", "cc", "cc1plus", "clang++", "ld", "as", "x86_64-linux-gnu-g++"}
)
"""Process names of a build of ours (ninja and what it runs)."""
"""torch.utils.cpp_extension's build lock (a FileBaton) inside the op's build directory."""


@dataclass(frozen=True)
class OpState:
    """One op in the extension cache, as found before loading it."""

    name: str
    directory: str
    """The op's build directory (the cache): empty for an op pre-built at install."""
    built: bool
    """Pre-built at install, or its ``<name>.so`` is in the cache: loading takes a moment."""
    locked: bool
    """Another process holds the build lock: loading waits for its build."""


def needed_builders() -> list[Any]:
    """The op builders ``deepspeed.initialize`` will load here: the shared-memory comm op on
    the CPU accelerator when DeepSpeed finds it compatible; none on a GPU (memtui's AdamW
    needs no DeepSpeed op)."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder(SHM_COMM)
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return []
    return [builder]


def op_state(builder: Any) -> OpState:
    """Where ``builder``'s op stands in the cache (creates its build directory, as torch would)."""
    from deepspeed.git_version_info import installed_ops
    from torch.utils.cpp_extension import _get_build_directory

    if installed_ops.get(builder.name, False):
        return OpState(builder.name, "", built=True, locked=False)
    directory = Path(_get_build_directory(builder.name, verbose=False))
    built = (directory / f"{builder.name}.so").exists()
    return OpState(builder.name, str(directory), built=built, locked=(directory / LOCK_FILE).exists())


def prepare_ops(before_load: Callable[[OpState], None] = lambda state: None) -> list[tuple[OpState, float]]:
    """Load every needed op, building it if the cache lacks it; ``before_load`` hears where
    each stands first, and again if a build turns out to be another process's (both found
    the cache empty; the other took the lock). Returns each op's state and the seconds its
    load took (the state as last said: a wait that began as a build)."""
    return [_load(builder, before_load) for builder in needed_builders()]


def _load(builder: Any, before_load: Callable[[OpState], None]) -> tuple[OpState, float]:
    said = [op_state(builder)]  # what before_load heard, newest last

    def say(state: OpState) -> None:
        said.append(state)
        before_load(state)

    say(said.pop())
    done = threading.Event()
    if not said[-1].built and not said[-1].locked:
        threading.Thread(target=_watch_lock, args=(said[-1], say, done), daemon=True).start()
    if said[-1].directory and not said[-1].built:
        threading.Thread(target=_clear_stale_lock, args=(Path(said[-1].directory), done), daemon=True).start()
    began = time.monotonic()
    try:
        builder.load(verbose=False)  # kept by DeepSpeed's OpBuilder: initialise reuses it
    finally:
        done.set()
    return said[-1], time.monotonic() - began


def _watch_lock(state: OpState, before_load: Callable[[OpState], None], done: threading.Event) -> None:
    """While this process loads an op it found unbuilt: once the build lock is there and no
    compiler of ours runs, twice in a row, the build is another process's: say so (once)."""
    lock, seen = Path(state.directory) / LOCK_FILE, 0
    while not done.wait(LOCK_POLL_S):
        seen = seen + 1 if lock.exists() and not _building_here() else 0
        if seen >= 2:  # ours: ninja starts within moments of taking the lock
            before_load(dataclasses.replace(state, locked=True))
            return


def _clear_stale_lock(directory: Path, done: threading.Event) -> None:
    """While this process waits on a build: remove the build lock once it is stale. torch's
    wait then ends; the op is built by whoever loads it next (this attempt fails to import it
    and the supervisor restarts it, or it builds itself if the lock is gone before it waits)."""
    while not done.wait(LOCK_POLL_S * 4):
        if stale_lock(directory, time.time()):
            lock = directory / LOCK_FILE
            print(
                f"removing a stale build lock {lock}: no build has worked there for {STALE_LOCK_S:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            lock.unlink(missing_ok=True)
            return


def stale_lock(directory: Path, now: float, busy: Callable[[Path], bool] | None = None) -> bool:
    """The lock in ``directory`` is older than ``STALE_LOCK_S``, nothing in the directory
    changed for as long, and no process works in it (``busy``: a process whose working
    directory it is, as ninja's is while it compiles)."""
    try:
        newest = max(p.stat().st_mtime for p in [directory / LOCK_FILE, *directory.iterdir()])
    except (OSError, ValueError):
        return False  # no lock (any more), or the directory is gone
    return now - newest > STALE_LOCK_S and not (busy or _worked_in)(directory)


def _worked_in(directory: Path) -> bool:
    """Whether any process we can see has ``directory`` as its working directory."""
    import psutil

    target = str(directory.resolve())
    for proc in psutil.process_iter():
        try:
            if proc.cwd() == target:
                return True
        except psutil.Error:
            continue
    return False


def _building_here() -> bool:
    """Whether ninja or a compiler runs under this process now."""
    import psutil

    try:
        return any(child.name() in BUILD_TOOLS for child in psutil.Process().children(recursive=True))
    except psutil.Error:
        return True  # cannot tell: keep saying what was said


def describe(state: OpState, took_s: float) -> str:
    """One line for a person: what loading the op cost and where it now is."""
    if not state.directory:
        return f"{state.name}: pre-built at install"
    if state.built:
        return f"{state.name}: already built in {state.directory} (loaded in {took_s:.1f} s)"
    how = "waited for another process's build" if state.locked else "built"
    return f"{state.name}: {how} in {took_s:.0f} s, cached in {state.directory} for every later run"


def _say_before_load(state: OpState) -> None:
    """On stderr: a build about to take a while, or a wait for another process's."""
    if state.locked:
        lock = Path(state.directory) / LOCK_FILE
        print(f"{state.name}: waiting for another process's build (lock {lock})", file=sys.stderr, flush=True)
    elif not state.built:
        print(f"{state.name}: building (once per machine) in {state.directory}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.trainer.op_cache",
        description="Build the DeepSpeed ops a memtui trainer needs here, ahead of the first run.",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the ops, each as found and its load's seconds",
    )
    args = parser.parse_args(argv)
    try:
        # DeepSpeed's import logs to stdout: with --json, stdout is the JSON alone
        with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
            loaded = prepare_ops(_say_before_load)
    except Exception as err:  # a compiler missing, a failed build: say it, exit 1
        print(f"cannot build: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ops": [asdict(state) | {"load_s": round(took, 3)} for state, took in loaded]}))
    else:
        for state, took in loaded:
            print(describe(state, took))
        if not loaded:
            print("no DeepSpeed op to build here: DeepSpeed loads none at start on this accelerator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
