"""What the supervisor and a standby trainer say to each other over the spare's stdio.

A standby trainer (``python -m engine.trainer --standby RUN_DIR``) imports torch and DeepSpeed,
loads the ops, writes ``READY`` on its stdout and waits on its stdin for one line: the
orders of the attempt it becomes (the arguments ``python -m engine.trainer`` would get, and
the attempt's log file). End of file instead of orders: the spare is not needed, it exits.
Torch-free; both sides read this one module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

STANDBY_FLAG = "--standby"
"""A spare's first argument: ``python -m engine.trainer --standby RUN_DIR``."""

READY = b"ready\n"
"""The spare's whole stdout before its orders: imports done, ops loaded, waiting."""

HEAD_START_ENV = "MEMTUI_HEAD_START"
"""Set (to 1) for the spare a supervisor starts for its own first attempt: nothing trains
yet, so it warms up at the trainer's priority, not aside (``engine.supervisor.trainers.spare_launch``)."""

PARENT_ENV = "MEMTUI_SPARE_PARENT"
"""The pid of the supervisor that started the spare. The spare asks the kernel to kill it
when its parent goes, but only once its interpreter runs: a parent gone before then (a
supervisor that lost a concurrent resume) is noticed by comparing with this, not with the
parent the spare finds (by then init)."""

MAX_ORDERS_BYTES = 64 * 1024  # one line; far above any real command line


@dataclass(frozen=True)
class StandbyOrders:
    """The attempt a spare becomes: its trainer arguments and the log its output goes to."""

    argv: list[str]
    """What ``python -m engine.trainer`` gets after its name: RUN_DIR --attempt N [--fresh]."""
    log: str
    """``logs/trainer-<attempt>.log``: appended to, as a cold trainer's output would be."""

    def encode(self) -> bytes:
        return json.dumps({"argv": self.argv, "log": self.log}).encode() + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> StandbyOrders:
        """The orders in ``line``; ValueError naming the field that is wrong."""
        if len(line) > MAX_ORDERS_BYTES:
            raise ValueError(f"standby orders: {len(line)} bytes, over {MAX_ORDERS_BYTES}")
        try:
            data = json.loads(line)
        except ValueError as err:
            raise ValueError(f"standby orders: not JSON: {err}") from None
        if not isinstance(data, dict):
            raise ValueError("standby orders: not a JSON object")
        argv, log = data.get("argv"), data.get("log")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("standby orders: 'argv' must be a list of strings")
        if not isinstance(log, str) or not log:
            raise ValueError("standby orders: 'log' must be a non-empty path")
        return cls(argv, log)
