"""The memory budget: ``memory.budget`` (bytes or a fraction) resolved against a device.

Torch-free and pure. The trainer makes the budget real on CUDA
(``torch.cuda.set_per_process_memory_fraction(budget / capacity)``); on the CPU it is the
capacity the controller steers by (and, with ``memory.cpu_enforce``, a hard limit).
"""

from __future__ import annotations


def budget_bytes(budget: int | float | None, capacity: int) -> int:
    """The budget in bytes: ``capacity`` when None, a fraction of it, or bytes capped at it.

    ``capacity`` is the device's total memory in bytes (host RAM on the CPU).
    """
    if capacity <= 0:
        raise ValueError(f"capacity must be positive, got {capacity}")
    if budget is None:
        return capacity
    if isinstance(budget, float) and budget <= 1.0:
        return max(1, int(budget * capacity))
    return min(int(budget), capacity)


def budget_fraction(budget: int, capacity: int) -> float:
    """``budget`` as the fraction of ``capacity`` that ``set_per_process_memory_fraction`` takes."""
    return min(1.0, max(budget, 1) / capacity)
