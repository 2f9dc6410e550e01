"""The prefetcher alone, with a made-up batch function: the tensors a call returns are the
function's own for that key, built ahead on another thread when the guess was right and on
the spot when it was wrong; one build at a time; a build's error reaches the caller of its
own key; and the wait is measured."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from engine.trainer.workloads.prefetcher import Prefetcher
from tests.waiting import wait_for


class Recorder:
    """A pure batch function of its key that notes who built what, and when."""

    def __init__(self, slow_s: float = 0.0, fails_at: tuple[int, int, int] | None = None) -> None:
        self.built: list[tuple[tuple[int, int, int], str]] = []
        self.slow_s, self.fails_at = slow_s, fails_at
        self.running = 0
        self.most_at_once = 0

    def __call__(self, step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, ...]:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            self.built.append(((step, micro, micro_batch), threading.current_thread().name))
            time.sleep(self.slow_s)
            if (step, micro, micro_batch) == self.fails_at:
                raise ValueError(f"no batch at {step, micro}")
            return (torch.full((micro_batch,), step * 100 + micro),)
        finally:
            self.running -= 1


def values(batch: tuple[torch.Tensor, ...]) -> list[int]:
    return [int(v) for v in batch[0]]


def test_each_call_gets_its_own_keys_batch_the_next_one_built_ahead() -> None:
    source = Recorder()
    feed = Prefetcher(source, lambda: 2, ahead=True, pin=False)
    got = [values(feed(step, micro, 3)) for step in range(3) for micro in range(2)]
    feed.close()
    assert got == [[s * 100 + m] * 3 for s in range(3) for m in range(2)]
    ahead = [key for key, thread in source.built if thread.startswith("batch-prefetch")]
    assert ahead[:5] == [(0, 1, 3), (1, 0, 3), (1, 1, 3), (2, 0, 3), (2, 1, 3)]  # every one after the first
    assert source.most_at_once == 1


def test_a_wrong_guess_is_built_on_the_spot_after_the_guess_ends() -> None:
    source = Recorder(slow_s=0.01)
    feed = Prefetcher(source, lambda: 2, ahead=True, pin=False)
    feed(0, 0, 4)  # guesses (0, 1, 4) next
    assert values(feed(0, 0, 2)) == [0, 0]  # a smaller micro-batch after an OOM: another key
    assert values(feed(0, 1, 2)) == [1, 1]  # guessed right again
    feed.close()
    assert source.most_at_once == 1  # the wrong guess ended before the right build began
    assert ((0, 0, 2), "MainThread") in source.built


def test_a_failed_build_is_the_error_of_its_own_key_and_of_no_other() -> None:
    source = Recorder(fails_at=(0, 1, 1))
    feed = Prefetcher(source, lambda: 2, ahead=True, pin=False)
    feed(0, 0, 1)  # builds (0, 1, 1) ahead: it fails there
    with pytest.raises(ValueError, match="no batch at"):
        feed(0, 1, 1)
    feed.close()

    wrong = Prefetcher(Recorder(fails_at=(0, 1, 1)), lambda: 2, ahead=True, pin=False)
    wrong(0, 0, 1)  # the guess fails, but nobody asks for it
    assert values(wrong(5, 0, 1)) == [500]
    wrong.close()


@pytest.mark.parametrize("ahead", [True, False])
def test_the_wait_is_the_time_the_caller_waited(ahead: bool) -> None:
    feed = Prefetcher(Recorder(slow_s=0.05), lambda: 4, ahead=ahead, pin=False)
    feed(0, 0, 1)
    first = feed.take_waited()
    assert first >= 0.05  # nothing was built ahead of the first call: it waited for the build
    if ahead:  # the step trains meanwhile, until the next batch is ready
        wait_for(lambda: feed._next is not None and feed._next[1].done(), what="the batch built ahead")
    feed(0, 1, 1)
    waited = feed.take_waited()
    feed.close()
    assert (waited < first) if ahead else (waited >= 0.05)  # a ready batch is taken, not built
    assert feed.take_waited() == 0.0
