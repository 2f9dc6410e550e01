"""``python -m engine.trainer RUN_DIR [--attempt N]``: one trainer process of a run.
``python -m engine.trainer --standby RUN_DIR``: a spare that warms up, then waits for the arguments
of the attempt it becomes (``engine.trainer.standby``; the supervisor's ``standby``).

The supervisor starts it with stdout/stderr redirected to ``logs/trainer-<attempt>.log``.
It trains from the newest checkpoint in RUN_DIR towards the run's target step, reporting
over the supervisor's socket. SIGTERM (or a stop command, or the supervisor going away)
finishes the current optimizer step, checkpoints and exits 0; SIGHUP is ignored.
Exit status: 0 completed or stopped, 1 error (after a ``trainer_error`` event), 2 bad usage,
66 no checkpoint verifies and ``--fresh`` was not given (restarting cannot help).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

from engine.domain import EXIT_NO_CHECKPOINT, STACK_DUMP_SIGNAL
from engine.events import TrainerError
from engine.extension_cache import set_extensions_dir
from engine.run.directory import PRIVATE_UMASK, RunDir
from engine.run.node_outcome import follower_leader, write_node_outcome
from engine.run.report_spool import SpoolWriter, spool_path
from engine.run.stack_files import open_live_stack_file
from engine.trainer.link import CONNECT_TIMEOUT_S, Link, LinkError, NullLink, SocketLink
from engine.trainer.ranks.parent_death import die_with_parent
from engine.trainer.standby import await_orders, is_standby
from engine.trainer.telemetry.startup_phases import StartupPhases

log = logging.getLogger("engine.trainer")  # run as `python -m engine.trainer`: __name__ is "__main__"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m engine.trainer",
        description="Run one memtui trainer process (normally started by the engine supervisor).",
    )
    parser.add_argument("run_dir", type=Path, help="the run directory (holds run.json and engine.sock)")
    parser.add_argument("--attempt", type=int, default=1, help="1 + restarts so far (default: 1)")
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait for the supervisor's socket (default: {CONNECT_TIMEOUT_S:.0f})",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start at step 0 if checkpoints exist but none verifies (default: refuse, exit 66)",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="do not connect to a supervisor (telemetry goes nowhere; for debugging)",
    )
    return parser.parse_args(argv)


def launcher_rank() -> int:
    """torchrun's RANK for this process (0 when started alone)."""
    return int(os.environ.get("RANK", "0") or 0)


def configure_logging() -> None:
    # torchrun's ranks share one log file: say which rank speaks
    rank = f"[rank {launcher_rank()}] " if "LOCAL_WORLD_SIZE" in os.environ else ""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s {rank}%(name)s: %(message)s")
    # ZeRO-3 calls torch.distributed's deprecated all_gather_into_tensor/reduce_scatter_tensor
    # every step, and something in the step enters warnings.catch_warnings, which resets the
    # "print once" registry: the same FutureWarning pair was printed on every step (542 lines
    # in 130 steps of a 2-rank run), gigabytes of log over a long run. Say it never.
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed.c10d_logger")
    # DeepSpeed's own logger is already at WARNING; torch.distributed's is chatty at INFO.
    for name in ("DeepSpeed", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.WARNING)


def install_signal_handlers(stop: threading.Event, run: RunDir, attempt: int) -> None:
    def on_term(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: finishing this step, then checkpointing", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an SSH hang-up never stops training
    # The supervisor asks a quiet trainer (every rank) for its stacks: the dump is written
    # from the signal handler in C, so a deadlocked interpreter still answers; each rank
    # into its own file (torchrun's ranks share one log, and a dump names no rank).
    try:
        sink: Any = open_live_stack_file(run.path, attempt, launcher_rank(), os.getpid())
    except OSError as err:
        log.warning("stacks will go to the log: %s", err)
        sink = sys.stderr
    faulthandler.register(signal.Signals[STACK_DUMP_SIGNAL], file=sink, all_threads=True, chain=False)


def open_link(run: RunDir, args: argparse.Namespace) -> Link:
    """Rank 0 dials the supervisor; other ranks (under torchrun) hear of it through rank 0."""
    if args.standalone or launcher_rank() > 0:
        return NullLink()
    client = f"memtui trainer pid {os.getpid()} attempt {args.attempt}"
    spool = SpoolWriter(spool_path(run, args.attempt))  # written only once the supervisor is gone
    return SocketLink.connect(run.socket, client=client, timeout_s=args.connect_timeout, spool=spool)


def main(argv: list[str] | None = None) -> int:
    os.umask(PRIVATE_UMASK)  # checkpoints and memory.json 0600, directories 0700
    args = parse_args(argv)
    configure_logging()
    if "LOCAL_WORLD_SIZE" in os.environ:  # a rank under torchrun: never outlive the launcher
        die_with_parent()
    run = RunDir(args.run_dir)
    try:
        config = run.read_config()
        link = open_link(run, args)
    except (OSError, ValueError, LinkError) as err:
        log.error("cannot start: %s", err)
        return 1
    install_signal_handlers(link.stop_requested, run, args.attempt)
    log.info("DeepSpeed op cache: %s", set_extensions_dir())  # before torch reads it
    phases = StartupPhases(link, args.attempt)
    try:
        # torch + deepspeed: imported after the link is up, so that consoles hear of it; a
        # spare imported them while it waited (a head start's supervisor said so at the launch)
        if "deepspeed" not in sys.modules:
            phases.enter("importing")
        import deepspeed  # noqa: F401  (seconds: part of the importing phase)

        from engine.trainer.checkpoints.checkpoint import NoVerifiedCheckpoint
        from engine.trainer.loop import train

        try:
            outcome = train(config, run, args.attempt, link, allow_fresh=args.fresh, phases=phases)
        except NoVerifiedCheckpoint as err:
            log.error("cannot resume: %s", err)
            message = f"cannot resume: {err}"
            # restartable=False: under torchrun the exit status is torchrun's, not ours
            link.event(TrainerError(error="NoVerifiedCheckpoint", restartable=False), message)
            return EXIT_NO_CHECKPOINT
        log.info("trainer %s", outcome)
        if follower_leader():  # a node other than node 0: tell this node's supervisor
            write_node_outcome(run, args.attempt, outcome)
        return 0
    except Exception as err:  # report anything, then exit non-zero
        traceback.print_exc()
        failure = TrainerError(
            error=type(err).__name__,
            traceback=traceback.format_exc()[-3000:],
            # MemoryHalt (adaptive memory): False = a restart cannot help (OOM at micro-batch 1,
            # fp16 loss-scale floor); True = restart with RUN_DIR/memory.json's micro-batch.
            restartable=getattr(err, "restartable", None),
        )
        link.event(failure, f"{type(err).__name__}: {err}"[:4000])
        return 1
    finally:
        link.close()


def exit_now(code: int) -> None:
    """End the trainer without the interpreter's teardown, once ``entry`` has returned.

    By then everything the run needs is on disk (``train`` returns after the last save is
    sealed, a crash after the written one is) and the link is closed; what is left is
    unloading torch and DeepSpeed:
    - it took 0.9 s of a core on every exit (2-core CPU host, ``tiny``: from the link's close
      to the exit), and a supervisor restarting a trainer that stopped on its own (a
      preemption, a memory halt) waits for it;
    - under torchrun, one rank in about four aborted in it after training had ended
      ("terminate called without an active exception", SIGABRT from a C++ thread still
      joinable in a static destructor), and torchrun reported the run failed.
    Flush our output and leave with the real status.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def warm_up() -> None:
    """A spare's head start: what every attempt does before its process group (seconds)."""
    os.umask(PRIVATE_UMASK)
    configure_logging()
    log.info("standby: DeepSpeed op cache %s", set_extensions_dir())
    import deepspeed  # noqa: F401
    import torch._dynamo  # noqa: F401  (torch's optimizers import it when built: 4 s of 5 in initialising)

    import engine.trainer.checkpoints.checkpoint  # noqa: F401
    import engine.trainer.loop  # noqa: F401

    # No op is loaded here: a default run needs none, and the ops a user's deepspeed_config
    # needs are known with the orders (the attempt loads them, saying so: op_cache).


def entry(argv: list[str]) -> int:
    """``main``, after a spare's wait for its orders when started with ``--standby``."""
    if not is_standby(argv):
        return main(argv)
    orders = await_orders(warm_up)
    return 0 if orders is None else main(orders)


if __name__ == "__main__":
    exit_now(entry(sys.argv[1:]))
