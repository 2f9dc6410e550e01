"""DeepSpeed's just-in-time ops in torch's extension cache: which ones a trainer needs, whether
each is built, being built by another process, or to be built; and building them ahead.

A default run needs none: memtui's optimizer is torch's AdamW, and the shared-memory op that
DeepSpeed's CPU backend would compile at start serves inference only, so the trainer declines
it (``engine.trainer.deepspeed_compat``, gap 3). A user's ``deepspeed_config`` may ask for
DeepSpeed's own optimizer (``engine.config.deepspeed_config.required_ops``: ``cpu_adam`` when it is
offloaded to the CPU, ``fused_adam`` on a GPU...), which DeepSpeed loads with
``torch.utils.cpp_extension.load``: the first time in an environment that compiles it with
ninja (tens of seconds to minutes) into ``TORCH_EXTENSIONS_DIR/<op>/`` (memtui's cache for this
environment unless the user set one: ``engine.extension_cache``), where every later run finds
``<op>.so``. A process that finds torch's ``lock`` file there waits until its builder is done.
torch's lock is a bare file, which a killed builder leaves behind for ever; so every memtui
process loads an op in turn, under an ``flock`` of its own in the same directory
(``load_turn``): the kernel releases it when its holder dies, so whoever holds it knows that
a torch lock still there has no live memtui builder, and removes it at once (a kill during
a build costs the next load nothing but the build). A lock left by a process that is not
ours (a user's own DeepSpeed script sharing the cache) is still removed only once stale.
``prepare_ops`` loads each needed op before ``deepspeed.initialize`` does (DeepSpeed's
builders keep what they loaded, so initialise finds it loaded), saying first whether it
builds or waits, and again whenever what the load does changes: the trainer's
``building_op`` and ``waiting_for_build`` phases. An op to build with no C++ compiler on
``PATH`` is refused in one line naming what to install (``MissingCompiler``).

A ``<op>.so`` in the cache does not mean the load will not build: torch rewrites the op's
``build.ninja`` at every load and ninja rebuilds whenever its commands differ (another
environment's include paths) or a source is newer. So a load is watched as it happens (see
``_watch_build``): a compiler of ours at work in the op's directory is a build, whatever the
cache held.

``python -m engine.trainer.op_cache [--config FILE] [--json]`` builds them ahead (``memtui prepare``).
Imports torch and DeepSpeed (in the trainer, or in this module's own process).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.config.config_file import ConfigError, load_run_config
from engine.config.deepspeed_config import build_deepspeed_config, required_ops
from engine.extension_cache import set_extensions_dir

LOCK_FILE = "lock"
"""torch.utils.cpp_extension's build lock (a FileBaton) inside the op's build directory."""
TURN_FILE = "memtui-load.flock"
"""Our own lock beside torch's: an ``flock`` each memtui process holds while it loads the op
(``load_turn``); the kernel releases it when the holder dies, however it dies."""
LOCK_POLL_S = 0.5
"""s between two looks at the build (lock, compilers) while an op loads."""
STALE_LOCK_S = 120.0
"""A build lock older than this, with no process at work in the build directory, was left by a
build that was killed (torch's lock is a bare file: nothing removes it then, and every later
process would wait on it for ever)."""
COMPILERS = frozenset({"c++", "g++", "gcc", "cc", "cc1plus", "clang++", "ld", "as", "x86_64-linux-gnu-g++"})
"""Process names of what ninja runs when it has work: compilers and the linker. ninja itself
is not one of them: torch runs it at every load, and it exits at once when nothing changed."""
BUILD_TOOLS = COMPILERS | {"ninja"}
"""Process names of a build of ours (ninja and what it runs)."""


@dataclass(frozen=True)
class OpState:
    """One op in the extension cache: as found before loading it, then as its load goes."""

    name: str
    directory: str
    """The op's build directory (the cache): empty for an op pre-built at install."""
    built: bool
    """Pre-built at install, or its ``<name>.so`` is in the cache and no build of ours was
    seen: loading takes a moment."""
    locked: bool
    """Another process holds the build lock: loading waits for its build."""
    holder: int | None = None
    """The pid of the memtui process whose turn (``load_turn``) is waited for, when known."""


def needed_builders(ds_config: Mapping[str, Any]) -> list[Any]:
    """The op builders ``deepspeed.initialize`` will load for ``ds_config`` here: those its
    optimizer requires (``engine.config.deepspeed_config.required_ops``: none for memtui's AdamW,
    ``cpu_adam`` for a user's offloaded DeepSpeed Adam...) that DeepSpeed finds compatible.
    The CPU backend's shared-memory op is declined, not loaded
    (``engine.trainer.deepspeed_compat``, gap 3): a default run builds nothing."""
    import deepspeed.ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    compatible = deepspeed.ops.__compatible_ops__
    return [
        ALL_OPS[name] for name in required_ops(ds_config) if name in ALL_OPS and compatible.get(name, False)
    ]


def op_state(builder: Any) -> OpState:
    """Where ``builder``'s op stands in the cache (creates its build directory, as torch would)."""
    from deepspeed.git_version_info import installed_ops
    from torch.utils.cpp_extension import _get_build_directory

    if installed_ops.get(builder.name, False):
        return OpState(builder.name, "", built=True, locked=False)
    directory = Path(_get_build_directory(builder.name, verbose=False))
    built = (directory / f"{builder.name}.so").exists()
    return OpState(builder.name, str(directory), built=built, locked=(directory / LOCK_FILE).exists())


def prepare_ops(
    ds_config: Mapping[str, Any], before_load: Callable[[OpState], None] = lambda state: None
) -> list[tuple[OpState, float]]:
    """Load every op ``ds_config`` needs, building it if the cache lacks it or torch finds it
    stale; ``before_load`` hears where each stands first, and again whenever the load turns
    out to do otherwise: a build of an op found built, a wait for another process's build.
    Returns each op's state and the seconds its load took (the state as last said)."""
    return [_load(builder, before_load) for builder in needed_builders(ds_config)]


class MissingCompiler(RuntimeError):
    """An op must be built here and no C++ compiler is on ``PATH``."""


def compiler() -> str | None:
    """The C++ compiler torch's extension builds run (``$CXX``, else ``c++``), if on ``PATH``."""
    return shutil.which(os.environ.get("CXX") or "c++")


def _load(builder: Any, before_load: Callable[[OpState], None]) -> tuple[OpState, float]:
    said = [op_state(builder)]  # what before_load heard, newest last
    if not said[0].built and not said[0].locked and compiler() is None:
        raise MissingCompiler(
            f"DeepSpeed op {builder.name} must be built here and there is no C++ compiler "
            f"({os.environ.get('CXX') or 'c++'} is not on PATH): install one (Debian/Ubuntu: "
            "apt install g++), or drop the DeepSpeed optimizer from deepspeed_config "
            "(memtui's default AdamW needs no op)"
        )

    def say(state: OpState) -> None:
        said.append(state)
        before_load(state)

    say(said.pop())
    done = threading.Event()
    directory = Path(said[-1].directory) if said[-1].directory else None
    turn: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if directory is not None:
        threading.Thread(target=_watch_build, args=(said[-1], say, done), daemon=True).start()
        threading.Thread(target=_clear_stale_lock, args=(directory, done), daemon=True).start()
        turn = load_turn(directory, lambda pid: say(dataclasses.replace(said[-1], locked=True, holder=pid)))
    began = time.monotonic()
    try:
        with turn:
            builder.load(verbose=False)  # kept by DeepSpeed's OpBuilder: initialise reuses it
    finally:
        done.set()
    return said[-1], time.monotonic() - began


@contextlib.contextmanager
def load_turn(
    directory: Path, waiting: Callable[[int | None], None], busy: Callable[[Path], bool] | None = None
) -> Iterator[None]:
    """This process's turn to load the op in ``directory``: the ``TURN_FILE`` flock, waited for
    (``waiting`` hears the holder's pid first, None if unknown) while another memtui process
    holds it; the holder writes its pid into the file. Once it is held, a
    torch lock in the directory has no live memtui builder: it is removed at once unless a
    process works in the directory (``busy``: a build that is not ours, by ninja's working
    directory)."""
    fd = os.open(directory / TURN_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting(_holder(fd))
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        lock = directory / LOCK_FILE
        if lock.exists() and not (busy or _worked_in)(directory):
            said = f"removing the build lock {lock}: the process that took it died"
            print(said, file=sys.stderr, flush=True)
            lock.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)  # and with it the flock


def _holder(fd: int) -> int | None:
    """The pid the turn's holder wrote into the turn file; None if it has not yet."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _watch_build(
    state: OpState,
    before_load: Callable[[OpState], None],
    done: threading.Event,
    tools: Callable[[], list[tuple[str, str]] | None] | None = None,
) -> None:
    """While this process loads an op: say what the load turns out to do, each time it changes.

    A compiler of ours at work in the op's directory is a build, whatever the cache held
    (``state`` is only a guess: a ``.so`` there is rebuilt when the ``build.ninja`` torch
    writes differs from the one on disk). Watching for it, rather than predicting ninja's
    decision, is exact (it is ninja's own, for every reason ninja has), needs no private
    torch function, and costs one look at our child processes every ``LOCK_POLL_S`` while
    the op loads: a build is said within half a second of its first compile. The build lock
    there, twice in a row with no build tool of ours running, is another process's build,
    waited for (ours starts ninja within moments of taking the lock). ``tools``: the (name,
    working directory) of each build tool under this process, None when unknown."""
    lock, target = Path(state.directory) / LOCK_FILE, str(Path(state.directory).resolve())
    building = dataclasses.replace(state, built=False, locked=False)
    said, held = state, 0
    while not done.wait(LOCK_POLL_S):
        running = (tools or _build_tools_here)()
        held = held + 1 if lock.exists() and running == [] else 0
        compiling = any(name in COMPILERS and cwd == target for name, cwd in running or [])
        doing = building if compiling else dataclasses.replace(said, locked=True) if held >= 2 else said
        if doing != said:
            said = doing
            before_load(doing)


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


def _build_tools_here() -> list[tuple[str, str]] | None:
    """(name, working directory) of ninja and each compiler running under this process now;
    None when it cannot tell."""
    import psutil

    found = []
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            if child.name() in BUILD_TOOLS:
                found.append((child.name(), child.cwd()))
        except psutil.Error:
            continue  # it ended meanwhile
    return found


def describe(state: OpState, took_s: float) -> str:
    """One line for a person: what loading the op cost and where it now is."""
    if not state.directory:
        return f"{state.name}: pre-built at install"
    if state.built:
        return f"{state.name}: already built in {state.directory} (loaded in {took_s:.1f} s)"
    how = f"waited for {_whose(state)} build" if state.locked else "built"
    return f"{state.name}: {how} in {took_s:.0f} s, cached in {state.directory} for every later run"


def _whose(state: OpState) -> str:
    return f"process {state.holder}'s" if state.holder else "another process's"


def _say_before_load(state: OpState) -> None:
    """On stderr: a build about to take a while, or a wait for another process's."""
    if state.locked:
        lock = Path(state.directory) / LOCK_FILE
        print(f"{state.name}: waiting for {_whose(state)} build (lock {lock})", file=sys.stderr, flush=True)
    elif not state.built:
        where = state.directory
        print(f"{state.name}: building (once per environment) in {where}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.trainer.op_cache",
        description="Build the DeepSpeed ops a memtui trainer needs here, ahead of the first run.",
    )
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE", help="the run's config (default: the defaults)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the ops, each as found and its load's seconds, and any error",
    )
    args = parser.parse_args(argv)
    set_extensions_dir()  # the trainers' cache: before torch reads it
    try:
        # DeepSpeed's import logs to stdout: with --json, stdout is the JSON alone
        with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
            loaded = prepare_ops(build_deepspeed_config(load_run_config(args.config)), _say_before_load)
    except (ConfigError, MissingCompiler) as err:  # the user's to fix: exit 2, as a usage error
        return _refuse(str(err), args.json, 2)
    except Exception as err:  # a failed build: say it, exit 1
        return _refuse(f"cannot build: {type(err).__name__}: {err}", args.json, 1)
    if args.json:
        print(json.dumps({"ops": [asdict(state) | {"load_s": round(took, 3)} for state, took in loaded]}))
    else:
        for state, took in loaded:
            print(describe(state, took))
        if not loaded:
            print("no DeepSpeed op to build: this run's optimizer needs none (memtui's default never does)")
    return 0


def _refuse(message: str, as_json: bool, code: int) -> int:
    """``message`` on stderr, and with ``--json`` one document on stdout all the same."""
    print(message, file=sys.stderr)
    if as_json:
        print(json.dumps({"ops": [], "error": message}))
    return code


if __name__ == "__main__":
    sys.exit(main())
