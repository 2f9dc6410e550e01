"""A sequence length that grows over the run: the built-in workload's longer-context phase.

``model.seq_len_start`` tokens from the first step, doubled every ``model.seq_len_doubling_steps``
optimizer steps, up to ``model.seq_len`` (which sizes the learned positions). A pure function
of the step, so a resumed run trains the lengths an uninterrupted one would have, and the
memory controller can ask for the coming step's length without drawing its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.run_config import ModelConfig


@dataclass(frozen=True)
class SequenceGrowth:
    start: int
    """Tokens per sample from step 0."""
    every: int
    """Optimizer steps between doublings."""
    final: int
    """The longest length (``model.seq_len``)."""

    @classmethod
    def of(cls, model: ModelConfig) -> SequenceGrowth | None:
        """The schedule ``model`` asks for; None: every step trains ``model.seq_len``."""
        if model.seq_len_start is None:
            return None
        return cls(model.seq_len_start, model.seq_len_doubling_steps, model.seq_len)

    def at(self, step: int) -> int:
        """Tokens per sample in optimizer step ``step`` (0-based)."""
        doublings = min(step // self.every, self.final.bit_length())  # more could not matter
        return min(self.final, self.start << doublings)
