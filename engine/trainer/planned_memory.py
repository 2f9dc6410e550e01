"""What ``memtui plan`` predicts for the run being trained, by part, for ``trainer_started``:
the console's memory panel shows it beside what the step really used.

The built-in model only: a user's workload has no shape memtui knows (its activations are
learned from measured peaks instead), so it gets no plan.
"""

from __future__ import annotations

from engine.config import RunConfig
from engine.events import PlannedMemory
from engine.memory.capacity_plan import CPU_RUNTIME_BYTES, CUDA_CONTEXT_BYTES, PlanRequest, breakdown
from engine.memory.transformer_shape import from_model_config

UNBOUNDED = 1 << 62  # the plan's capacity plays no part in the breakdown


def planned_memory(config: RunConfig, world_size: int, device_type: str) -> PlannedMemory | None:
    if config.workload is not None:
        return None
    m, train = config.model, config.train
    request = PlanRequest(
        shape=from_model_config(m.n_layer, m.n_head, m.d_model, m.seq_len),
        precision=train.precision,
        zero_stage=train.zero_stage,
        micro_batch=train.micro_batch,
        global_batch=train.global_batch,
        gpus_per_node=world_size,
        nodes=1,
        gpu_memory=UNBOUNDED,
        context_bytes=CUDA_CONTEXT_BYTES if device_type == "cuda" else CPU_RUNTIME_BYTES,
        on_cpu=device_type != "cuda",
    )
    b = breakdown(request)
    return PlannedMemory(
        params=b.params,
        grads=b.grads,
        optimizer=b.optimizer,
        gathered=b.gathered,
        activations_per_sample=b.activations_per_sample,
        margin=b.cuda_context + b.allocator,
        micro_batch=train.micro_batch,
        planned_peak=b.total,
    )
