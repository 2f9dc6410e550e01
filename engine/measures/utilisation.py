"""Where a model FLOPs utilisation (MFU) stops being one: the ceiling both the trainer
(which sends it) and the console (which shows it or flags the peak) read. Torch-free, pure.
"""

from __future__ import annotations

MFU_CEILING = 1.0
"""The most a utilisation can be: a figure above it says the peak was under-measured (a
CPU probe on a loaded machine, a wrong ``peak_tflops``), not that the model beat it."""


def credible_mfu(value: float | None) -> float | None:
    """``value`` where it can be a utilisation (at most ``MFU_CEILING``), else None: shown
    flagged (``above_peak``), never as an MFU over 100%."""
    return value if value is None or value <= MFU_CEILING else None


def above_peak(achieved_tflops: float | None, peak_tflops: float | None, devices: int) -> bool:
    """True when the run's model TFLOP/s beat the devices' peak: the peak is wrong."""
    if achieved_tflops is None or not peak_tflops or devices < 1:
        return False
    return achieved_tflops > MFU_CEILING * peak_tflops * devices
