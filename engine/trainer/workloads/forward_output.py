"""What a workload's forward returns: the loss alone, or the loss and scalars of its own.

::

    def forward(self, x, y):
        ...
        return loss                          # a scalar tensor, or
        return loss, {"accuracy": acc}       # plus named scalars (0-dim tensors or numbers)

DeepSpeed's ``engine(*batch)`` returns the module's output unchanged, so the trainer splits
it here; the named values go through ``engine.measures.user_metrics.MetricScreen`` before anything
reports them.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from engine.trainer.workloads.workload import WorkloadError


def split_output(output: object) -> tuple[torch.Tensor, Mapping[object, object]]:
    """(loss, named values) of one forward; a contract breach is a ``WorkloadError``."""
    if isinstance(output, torch.Tensor):
        return output, {}
    if isinstance(output, tuple) and len(output) == 2 and isinstance(output[0], torch.Tensor):
        named = output[1]
        if not isinstance(named, Mapping):
            raise WorkloadError(
                f"the model's forward returned (loss, {type(named).__name__}): the second item "
                "must be a mapping of names to scalars"
            )
        return output[0], named
    raise WorkloadError(
        f"the model's forward returned {type(output).__name__}: expected a scalar loss tensor "
        "or (loss, {name: scalar})"
    )


def as_number(value: object) -> object:
    """A 0-dim (or one-element) tensor as a Python float (one host sync); anything else as
    it is, for the screen to judge."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().float().item())
    return value
