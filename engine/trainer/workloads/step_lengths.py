"""The tokens of an optimizer step whose sequence lengths vary, read before the step.

From the workload's ``lengths(step, micro, micro_batch)`` (cheap: no batch is built), over
the step's samples on every rank (the ``global_batch / micro_batch`` blocks of the
configured micro-batch that ``SampleWindow`` draws), so every rank reads the same figures
without a collective:

- ``longest(step)``: tokens per sample of the step's longest sample, the padded length of
  its micro-batches at most; the memory model predicts the peak from it before the step;
- ``tokens(step)``: the tokens the step trains (padding left out), for tokens and tokens/s.

A step is asked about more than once (the controller before it, telemetry after it):
its figures are computed once.
"""

from __future__ import annotations

from engine.trainer.workloads.workload import LengthsFn

KEPT_STEPS = 4  # steps whose figures are kept (the coming one and the one just done suffice)


class StepLengths:
    def __init__(self, lengths: LengthsFn, base_micro_batch: int, global_batch: int) -> None:
        self.lengths = lengths
        self.base = base_micro_batch
        self.blocks = global_batch // base_micro_batch
        """Blocks of the configured micro-batch in one step, over every rank."""
        self._figures: dict[int, tuple[int, int]] = {}  # step -> (longest, tokens)

    def longest(self, step: int) -> int:
        """Tokens of the longest sample in optimizer step ``step`` (0-based), any rank's."""
        return self._of(step)[0]

    def tokens(self, step: int) -> int:
        """Tokens optimizer step ``step`` trains over every rank."""
        return self._of(step)[1]

    def tokens_before(self, step: int) -> int:
        """Tokens steps ``0 .. step-1`` trained (a resume from a checkpoint without the count)."""
        return sum(self._compute(s)[1] for s in range(step))

    def _of(self, step: int) -> tuple[int, int]:
        figures = self._figures.get(step)
        if figures is None:
            figures = self._figures[step] = self._compute(step)
            if len(self._figures) > KEPT_STEPS:
                del self._figures[min(self._figures)]
        return figures

    def _compute(self, step: int) -> tuple[int, int]:
        longest = total = 0
        for block in range(self.blocks):
            lengths = self.lengths(step, block, self.base)
            longest = max(longest, int(lengths.max()))
            total += int(lengths.sum())
        return longest, total
