"""The eval-loss trend a planner may cite: the held-out loss rising over the last evals
while the training loss falls (the model fits its training data better and generalises
worse). Pure and torch-free.
"""

from __future__ import annotations

import math
from collections import deque

RISING_EVALS = 3
"""Evals in a row whose held-out loss must each be above the one before."""


class EvalTrend:
    """The newest evals, each with the training loss of its moment."""

    def __init__(self, evals: int = RISING_EVALS) -> None:
        self.points: deque[tuple[int, float, float]] = deque(maxlen=evals)
        """(step, held-out loss, recent mean training loss) of the newest evals."""

    def note(self, step: int, eval_loss: float, train_loss: float | None) -> None:
        """One eval; ``train_loss``: the mean training loss of the steps just before it (None:
        none known, and the trend starts again)."""
        if train_loss is None or not (math.isfinite(eval_loss) and math.isfinite(train_loss)):
            self.points.clear()
            return
        self.points.append((step, eval_loss, train_loss))

    def evidence(self) -> str | None:
        """One line when the held-out loss rose at each of the last evals while the training
        loss fell from the first to the last of them; None otherwise."""
        if len(self.points) < (self.points.maxlen or 0):
            return None
        evals = [p[1] for p in self.points]
        if any(later <= earlier for earlier, later in zip(evals, evals[1:], strict=False)):
            return None
        (first_step, first_eval, first_train), (last_step, last_eval, last_train) = (
            self.points[0],
            self.points[-1],
        )
        if last_train >= first_train:
            return None
        return (
            f"eval loss rising over the last {len(evals)} evals ({first_eval:.4g} at step {first_step}"
            f" -> {last_eval:.4g} at step {last_step}) while the train loss fell"
            f" ({first_train:.4g} -> {last_train:.4g}): overfitting?"
        )
