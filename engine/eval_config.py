"""``[eval]``: how often the trainer measures a held-out loss, and on how many batches.
Re-exported by ``engine.config``, where ``RunConfig`` holds it. Torch-free.
"""

from __future__ import annotations

from pydantic import Field

from engine.oversight_config import StrictSection


class EvalConfig(StrictSection):
    """A held-out loss at a step boundary, on ``workload.eval_batch`` (the built-in and the
    Hugging Face workloads hold out the last 2% of their data).

    Cost: one eval is ``batches`` forward passes without gradients at the configured
    micro-batch, about a third of a training micro-step each: at the defaults about 2.7
    optimizer steps of time every 200 steps with one micro-step per step (~1.3% of the
    run), less with gradient accumulation. The eval's seconds are reported on the next
    step's sample (``eval_s``) and counted apart in ``memtui report``."""

    every_steps: int = Field(200, ge=0)
    """Evaluate after every N optimizer steps (when ``global_steps % N == 0``); 0 = never."""
    batches: int = Field(8, ge=1, le=100_000)
    """Held-out batches per eval (indices ``0 .. batches-1``, the same every time, so evals
    are comparable); with several ranks each rank takes its share and the loss is their mean."""
