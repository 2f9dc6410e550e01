"""Sealing checkpoints on a background thread, so that training stalls only for the write.

A save has two halves (``CheckpointStore.stage`` and ``.seal``). The first, DeepSpeed's
``torch.save`` of every state into the staging dir, must happen at the step boundary: it
is the snapshot. The second (fsync, sha256 of every file, manifest, rename, verify,
``latest``, prune) only reads and moves files that nothing changes any more, so it can run
while the next steps train. Measured on the ``small`` preset (68 MB per tag), the second
half was about three quarters of the save.

At most one seal is in flight: the next save waits for it (its stall counts the wait), as
a new save sets leftover staging dirs aside. A crash before the seal ends leaves a staging
dir, which the next resume moves to ``quarantine/`` with an event; the older checkpoints are
untouched, exactly as for a crash during a synchronous save. Torch-free.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from engine.checkpoints.store import SaveOutcome


class CheckpointSealer:
    """One background thread that seals the staged saves handed to it, one at a time."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-seal")
        self._in_flight: Future[SaveOutcome] | None = None

    @property
    def busy(self) -> bool:
        """A seal was submitted and its outcome not collected yet."""
        return self._in_flight is not None

    def submit(self, seal: Callable[[], SaveOutcome]) -> None:
        """Start ``seal`` on the thread. The caller waits for the previous one first (and
        before staging the next save, which sets leftover staging dirs aside): one in
        flight at most."""
        if self._in_flight is not None:
            raise RuntimeError("a checkpoint is still being sealed: wait() for it first")
        self._in_flight = self._pool.submit(seal)

    def poll(self) -> SaveOutcome | None:
        """The finished seal's outcome, once; None while it runs or when none was submitted."""
        if self._in_flight is None or not self._in_flight.done():
            return None
        return self.wait()[0]

    def wait(self) -> tuple[SaveOutcome | None, float]:
        """Block until the seal in flight ends: (its outcome or None, seconds waited)."""
        future, self._in_flight = self._in_flight, None
        if future is None:
            return None, 0.0
        started = time.perf_counter()
        outcome = future.result()  # seal() raises nothing: a failure is an outcome
        return outcome, time.perf_counter() - started

    def close(self) -> SaveOutcome | None:
        """Wait for the seal in flight (its outcome, uncollected) and end the thread."""
        outcome, _ = self.wait()
        self._pool.shutdown(wait=True)
        return outcome
