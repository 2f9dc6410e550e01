"""The controller judges a peak with the allocator's fragmentation added: the budget caps
reserved bytes, and fragmented ones cannot be handed back, so a peak that looks "ok" by
allocated bytes alone is at the cap. Torch-free."""

from __future__ import annotations

from engine.memory.controller import ControllerState, Geometry, Reading, decide
from tests.engine.memory_policies import policy_of

GIB = 1 << 30
POLICY = policy_of(global_batch=32, min_micro_batch=1, max_micro_batch=16, cooldown_steps=0)


def test_fragmentation_turns_an_allocated_ok_into_a_shrink() -> None:
    predicted = {m: GIB // 10 + m * GIB // 20 for m in POLICY.micro_batches()}  # 8: 0.5 GiB
    geometry = Geometry(16, 2)
    peak = int(0.80 * GIB)  # allocated: 80% of the room, under warn (85%)
    calm = Reading(step=50, peak=peak, budget=GIB, predicted=predicted)
    _, change = decide(ControllerState(), geometry, calm, POLICY)
    assert change is None
    split = Reading(step=50, peak=peak, budget=GIB, predicted=predicted, fragmentation=GIB // 5)
    state, change = decide(ControllerState(), geometry, split, POLICY)
    assert state.level == "critical" and change is not None and change.kind == "shrink"
    assert change.after.micro_batch < 16
