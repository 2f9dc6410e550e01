"""``MemoryHalt``: the memory path cannot go on (an OOM at the smallest micro-batch or on
another rank, the fp16 loss-scale floor); the trainer ends with it, naming the reason."""

from __future__ import annotations


class MemoryHalt(RuntimeError):
    """The memory path cannot go on; the message is the run's reason."""

    def __init__(self, reason: str, restartable: bool) -> None:
        super().__init__(reason)
        self.restartable = restartable
        """True when a restart (with the micro-batch in memory.json) is the way on."""
