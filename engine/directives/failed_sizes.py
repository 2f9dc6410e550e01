"""Micro-batches that ran out of memory, and the growth they forbid for a while.

The trainer's memory controller reports each OOM (``memory_adapted``, kind ``oom``) with
the micro-batch that failed and the optimizer step. For ``memory.retry_after_steps`` steps
after it, growing to that size or a larger one is refused: the planner does not suggest
it and the policy rejects it (defence in depth: an operator's or an external planner's
directive too), with a reason naming the OOM's step. Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.run.storage.store import Store


def growth_refusal(
    size: int, current: int | None, ooms: Mapping[int, int], step: int, retry_after: int
) -> str | None:
    """Why growing to ``size`` from ``current`` is refused, or None. ``ooms``: micro-batch
    -> the optimizer step of its newest OOM; ``retry_after``: steps before a size that
    failed may be tried again. A size at or below ``current`` is no growth; an unknown
    ``current`` counts as growth (zero trust)."""
    if current is not None and size <= current:
        return None
    recent = [(at, failed) for failed, at in ooms.items() if failed <= size and step - at < retry_after]
    if not recent:
        return None
    at, failed = max(recent)  # the newest OOM
    ago = max(0, step - at)
    return (
        f"micro_batch_size {size}: out of memory at micro-batch {failed} at step {at}, "
        f"{ago} step{'' if ago == 1 else 's'} ago (memory.retry_after_steps = {retry_after})"
    )


def stored_ooms(store: Store) -> dict[int, int]:
    """Micro-batch -> the step of its newest OOM, from a run's stored ``memory_adapted``
    events (a restarted supervisor remembers what its predecessor was told)."""
    rows = store.query(
        "SELECT json_extract(data, '$.from_micro_batch'), json_extract(data, '$.step') FROM events"
        " WHERE type = 'memory_adapted' AND json_extract(data, '$.kind') = 'oom' ORDER BY seq"
    )
    return {int(size): int(step) for size, step in rows if size is not None and step is not None}
