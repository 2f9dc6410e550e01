"""A standby trainer's wait: warm up, say ready, take one attempt's orders, become it.

The supervisor starts ``python -m engine.trainer --standby RUN_DIR`` ahead of any restart (see
``engine.supervisor.standby``). While it waits it dies with the supervisor
(``PR_SET_PDEATHSIG``): a spare never outlives its run. Once it has its orders it is an
ordinary trainer: it outlives the supervisor as a cold one does, its stdin is /dev/null
and its stdout and stderr go to the attempt's log. Torch-free itself (the warm-up is the
caller's), so that the test suite's fake trainer waits the same way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from engine.run.standby_orders import MAX_ORDERS_BYTES, READY, STANDBY_FLAG, StandbyOrders
from engine.trainer.parent_death import die_with_parent, outlive_parent


def is_standby(argv: list[str]) -> bool:
    """The process was started as a spare: ``--standby [RUN_DIR]`` (the run dir only names
    the spare's run in ``ps``; its orders say which run it trains)."""
    return argv[:1] == [STANDBY_FLAG] and len(argv) <= 2


def await_orders(warm: Callable[[], None]) -> list[str] | None:
    """Warm up, say ready, wait; the attempt's trainer arguments, or None (no orders: exit)."""
    die_with_parent()
    ready = os.dup(1)  # the supervisor's pipe; whatever the warm-up prints goes to stderr's log
    os.dup2(2, 1)
    warm()
    os.write(ready, READY)
    os.close(ready)
    line = sys.stdin.buffer.readline(MAX_ORDERS_BYTES + 1)
    if not line:
        return None  # the supervisor retired this spare (or is gone)
    orders = StandbyOrders.decode(line)
    outlive_parent()
    become(orders.log)
    return orders.argv


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
