"""The run's checkpoints as a full verification finds them, kept fresh off the event loop.

``status`` answers from ``standing`` at once; a worker thread re-reads the catalog every
``WATCH_INTERVAL_S`` (a tag none of whose files changed is not hashed again, so a pass over
known tags is a few ``stat`` calls). Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from engine.checkpoints.standing import Standing, standing_of

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 1.0  # s between passes over the checkpoints directory


class CheckpointWatch:
    """The newest ``Standing`` of one checkpoints directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.standing = Standing()
        """Until the first pass ends: nothing known (no checkpoint named)."""

    async def run(self, interval_s: float = WATCH_INTERVAL_S) -> None:
        while True:
            try:
                self.standing = await asyncio.to_thread(standing_of, self.directory)
            except OSError as err:  # an unreadable directory now: say nothing rather than the past
                log.warning("cannot read the checkpoints in %s: %s", self.directory, err)
                self.standing = Standing()
            await asyncio.sleep(interval_s)
