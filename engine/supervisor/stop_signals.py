"""The supervisor process's signals: SIGTERM or SIGINT stops the run gracefully (the trainer
finishes its step, checkpoints and exits), the same again while stopping kills the trainer
at once, and SIGHUP (an SSH hang-up) is logged and ignored. Installed by
``python -m engine supervise`` only; an in-process supervisor leaves its host's signals
alone. Torch-free."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

log = logging.getLogger(__name__)


def install_stop_signals(
    stopping: Callable[[], bool], stop: Callable[[str], object], kill: Callable[[], None]
) -> None:
    """On the running loop: ``stop(reason)`` on the first SIGTERM/SIGINT, ``kill()`` on one
    that comes while ``stopping()``; SIGHUP ignored."""
    loop = asyncio.get_running_loop()

    def on_stop_signal(name: str) -> None:
        if not stopping():
            log.info("%s: stopping the run", name)
            stop(f"{name} received")
        else:
            log.warning("%s again while stopping: killing the trainer now", name)
            kill()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop_signal, sig.name)
    # SIGHUP must never end a run; a handler (unlike SIG_IGN) is not inherited by the trainer.
    loop.add_signal_handler(signal.SIGHUP, log.info, "SIGHUP ignored")
