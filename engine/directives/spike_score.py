"""A loss spike by a robust z-score, and the rollback that answers it. Pure and torch-free.

The score of a loss against the recent window is ``(loss - median) / (MAD_SCALE * MAD)``,
MAD the median absolute deviation from the median: one earlier spike in the window moves
neither (a mean and a standard deviation would be dragged by it), and ``MAD_SCALE`` makes
it comparable to a standard deviation for normal noise. A loss ``SPIKE_Z`` or more above
is a spike. The tag chosen is the newest verified one saved before the spiking step ran
(its step below the spike's) and within the horizon; the skip leaves out every step from
it through the spike (``engine.rollback.skip_past``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.rollback import Rollback, skip_past

SPIKE_Z = 8.0  # robust z-score at or above which a loss is a spike (normal noise: < 4)
MIN_WINDOW = 20  # losses needed before a score means anything
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal noise
MAD_FLOOR = 1e-3  # of the median: a flat window's spread, so that a score stays finite


@dataclass(frozen=True)
class SpikeReading:
    """A loss scored against its window."""

    loss: float
    z: float
    median: float
    mad: float
    window: int
    """Losses in the window (finite ones, the newest before this loss)."""

    @property
    def spike(self) -> bool:
        return self.z >= SPIKE_Z


def robust_z(window: Sequence[float], loss: float) -> SpikeReading | None:
    """``loss`` scored against ``window`` (finite losses); None with under MIN_WINDOW of them.
    A non-finite loss scores inf (a NaN loss is the non-finite rules' business, not a spike's)."""
    if len(window) < MIN_WINDOW:
        return None
    median = statistics.median(window)
    mad = statistics.median(abs(x - median) for x in window)
    scale = MAD_SCALE * max(mad, MAD_FLOOR * abs(median), 1e-12)
    z = (loss - median) / scale if math.isfinite(loss) else math.inf
    return SpikeReading(loss, z, median, mad, len(window))


def rollback_for(spike_step: int, verified: Mapping[str, int], horizon_steps: int) -> Rollback | None:
    """The newest verified tag before ``spike_step`` (as telemetry numbers it) and within the
    horizon, skipping through the spike; None: no such tag."""
    usable = [
        (step, tag)
        for tag, step in verified.items()
        if step < spike_step and spike_step - step <= horizon_steps
    ]
    if not usable:
        return None
    step, tag = max(usable)
    return Rollback(tag=tag, skip_batches=skip_past(step, spike_step))


def spike_evidence(reading: SpikeReading, step: int, rollback: Rollback) -> list[str]:
    """What the suggestion cites, one figure a line."""
    return [
        f"loss {reading.loss:.4g} at step {step}: robust z {reading.z:.1f} (spike: >= {SPIKE_Z:g})",
        f"{reading.window}-step window: median {reading.median:.4g}, MAD {reading.mad:.3g}",
        f"tag {rollback.tag} (step {rollback.tag_step}), newest verified before the spike",
        f"skip {rollback.skip_batches} steps of data: the tag's through the spike's",
    ]
