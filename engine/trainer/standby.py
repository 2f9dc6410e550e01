"""A standby trainer's wait: warm up, say ready, take one attempt's orders, become it.

The supervisor starts ``python -m engine.trainer --standby RUN_DIR`` ahead of any restart (see
``engine.supervisor.trainers.standby``). While it waits it dies with the supervisor
(``PR_SET_PDEATHSIG``): a spare never outlives its run. Once it has its orders it is an
ordinary trainer: it outlives the supervisor as a cold one does, its stdin is /dev/null
and its stdout and stderr go to the attempt's log. Torch-free itself (the warm-up is the
caller's), so that the test suite's fake trainer waits the same way.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable, MutableMapping

from engine.cpu_share import step_aside
from engine.domain import STACK_DUMP_SIGNAL
from engine.run.standby_orders import (
    HEAD_START_ENV,
    MAX_ORDERS_BYTES,
    PARENT_ENV,
    READY,
    STANDBY_FLAG,
    StandbyOrders,
)
from engine.trainer.ranks.parent_death import die_with_parent, outlive_parent

SPARE_NICE = 19  # nice steps of the warm-up's thread: the lowest, it waits for idle cores


def is_standby(argv: list[str]) -> bool:
    """The process was started as a spare: ``--standby [RUN_DIR]`` (the run dir only names
    the spare's run in ``ps``; its orders say which run it trains)."""
    return argv[:1] == [STANDBY_FLAG] and len(argv) <= 2


def await_orders(warm: Callable[[], None]) -> list[str] | None:
    """Warm up, say ready, wait; the attempt's trainer arguments, or None (no orders: exit)."""
    die_with_parent(int(os.environ.get(PARENT_ENV) or 0) or None)
    # A spare asked for its stacks (a hang watch, an operator) writes them to its log, as a
    # trainer does, instead of dying of the signal's default action while it warms up.
    faulthandler.register(signal.Signals[STACK_DUMP_SIGNAL], file=sys.stderr, all_threads=True, chain=False)
    ready = os.dup(1)  # the supervisor's pipe; whatever the warm-up prints goes to stderr's log
    os.dup2(2, 1)
    warm_in_turn(warm)
    os.write(ready, READY)
    os.close(ready)
    line = sys.stdin.buffer.readline(MAX_ORDERS_BYTES + 1)
    if not line:
        return None  # the supervisor retired this spare (or is gone)
    orders = StandbyOrders.decode(line)
    outlive_parent()
    become(orders.log)
    return orders.argv


def warm_in_turn(warm: Callable[[], None], environ: MutableMapping[str, str] = os.environ) -> None:
    """Warm up aside (``warm_aside``), or at once in the main thread when this spare is its
    supervisor's head start (``HEAD_START_ENV``, taken out of ``environ``: the attempt's own
    children never see it): no trainer runs yet, so nothing is slowed by it."""
    if environ.pop(HEAD_START_ENV, None):
        warm()
    else:
        warm_aside(warm)


def warm_aside(warm: Callable[[], None]) -> None:
    """Run ``warm`` in a thread of its own at the lowest priority, and wait for it.

    The spare starts while the run trains: its imports (seconds of CPU) would take cores
    from the trainer's steps (on a CPU host, every core is the trainer's), so they get only
    what the trainer leaves. On Linux a nice value is a thread's and is inherited by the
    threads a thread creates: the main thread, which becomes the attempt's trainer and
    starts torch's compute threads, keeps the process's priority (nobody without root can
    raise a lowered one back). What the warm-up's own thread creates stays low: import
    torch starts one idle native thread, which uses no CPU while training (measured: one
    tick in 300 steps)."""
    failed: list[BaseException] = []

    def aside() -> None:
        step_aside(SPARE_NICE)
        try:
            warm()
        except BaseException as err:  # handed to the main thread, which raises it
            failed.append(err)

    thread = threading.Thread(target=aside, name="standby-warm-up")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def become(log: str) -> None:
    """Take the attempt's stdio: stdin /dev/null, stdout and stderr appended to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
