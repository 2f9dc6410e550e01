"""The standby trainer's own events: a spare ready (with what it costs while idle) and a spare
lost (with when the next one starts). Its takeover is ``trainer_launched`` with
``standby: true``. Torch-free."""

from __future__ import annotations

from engine.events.payload import Payload


class StandbyReady(Payload):
    """A spare trainer has imported torch and DeepSpeed, loaded the ops, and waits."""

    event_type = "standby_ready"
    pid: int
    warmup_s: float
    """Seconds from its launch to its ready line."""
    rss_mib: float
    """Resident memory while it waits (MiB): the price of a warm restart."""
    idle_cpu_percent: float
    """Its CPU use while it waits, in percent of one core, over ``idle_window_s``."""
    idle_window_s: float


class StandbyLost(Payload):
    """A spare died while it waited (the OOM killer, an operator's kill); another follows."""

    event_type = "standby_lost"
    severity = "warning"
    pid: int
    returncode: int
    retry_in_s: float
    """Seconds before the next spare starts: doubled for each spare in a row that dies young."""
