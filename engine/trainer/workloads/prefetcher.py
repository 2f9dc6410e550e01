"""The next micro-batch built while the current one trains: a ``BatchFn`` that computes the
batch the loop will ask for next on a background thread.

A workload's ``batch(step, micro, micro_batch)`` is a pure function of its arguments (a
resumed run relies on it to draw the same samples), so building one ahead changes nothing
but when it is built: the loop gets the very tensors it would have built itself, and a
resumed or prefetched run's losses equal an unprefetched one's. The key of the next call is
predicted from the current one and the engine's accumulation (the next micro-batch of the
step, or the first of the next step); a wrong guess (a new geometry, an OOM's redone window)
is built on the spot once the guessed one ends, so the workload is never called twice at
once. One batch ahead at most: the memory it holds is one micro-batch's.

On CUDA the batch is copied into pinned (page-locked) host memory on the background thread,
so that the loop's ``.to(device, non_blocking=True)`` is a real asynchronous copy (from
pageable memory it is a synchronous one). Copies on a side stream are not done: the copy is
queued on the current stream ahead of the forward that needs it.

``waited_s`` is the time the training thread spent waiting for data (the build itself when
prefetching is off or guessed wrong): the step's data-wait, reported as ``data_wait_s``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from engine.trainer.workloads.workload import BatchFn

Batch = tuple[torch.Tensor, ...]
Key = tuple[int, int, int]  # (step, micro, micro_batch)


class Prefetcher:
    """A ``BatchFn`` over ``batch`` that builds the next call's batch ahead (``ahead``)."""

    def __init__(self, batch: BatchFn, accumulation: Callable[[], int], *, ahead: bool, pin: bool) -> None:
        self._batch = batch
        self._accumulation = accumulation  # micro-batches per optimizer step, read at each call
        self._pin = pin
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-prefetch") if ahead else None
        self._next: tuple[Key, Future[Batch]] | None = None
        self.waited_s = 0.0
        """Seconds the caller waited for batches since the last ``take_waited``."""

    def __call__(self, step: int, micro: int, micro_batch: int) -> Batch:
        key = (step, micro, micro_batch)
        started = time.perf_counter()
        found = self._take(key)
        self.waited_s += time.perf_counter() - started
        if self._pool is not None:
            after = (
                (step, micro + 1, micro_batch)
                if micro + 1 < self._accumulation()
                else (step + 1, 0, micro_batch)
            )
            self._next = (after, self._pool.submit(self._build, after))
        return found

    def take_waited(self) -> float:
        """The data-wait seconds since the last call, and start counting afresh."""
        waited, self.waited_s = self.waited_s, 0.0
        return waited

    def close(self) -> None:
        """Drop the batch built ahead and end the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._next = None

    def _take(self, key: Key) -> Batch:
        ahead, self._next = self._next, None
        if ahead is not None:
            guessed, future = ahead
            if guessed == key:
                return future.result()  # its error, if the build failed, as the loop's own
            _settled(future)  # a wrong guess: let it end first (one call at a time)
        return self._build(key)

    def _build(self, key: Key) -> Batch:
        built = self._batch(*key)
        return tuple(t.pin_memory() for t in built) if self._pin else built


def _settled(future: Future[Batch]) -> None:
    """Wait for a guessed build nobody will use; its error is nobody's either (the loop
    builds the key it asked for itself, and meets its own error)."""
    with contextlib.suppress(Exception):
        future.result()
