"""The least-squares slope of a series: the loss trend the rule planner and the effect
summary both read. Pure and torch-free."""

from __future__ import annotations

import math
from collections.abc import Sequence


def slope(values: Sequence[float]) -> float | None:
    """Change per index (per step, for one value a step) of the best straight line through
    the finite ``values``; None for fewer than two of them."""
    points = [(i, v) for i, v in enumerate(values) if math.isfinite(v)]
    n = len(points)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
