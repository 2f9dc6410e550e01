"""What ``memtui plan`` predicts for the run being trained, by part, for ``trainer_started``:
the console's memory panel shows it beside what the step really used.

Planned for the model built (``engine.memory.model_description``: the module's parameter
count, the shape of the built-in or Hugging Face model or the one a workload declares), the
offload of the run's ``deepspeed_config`` and its activation checkpointing. A workload that
declares no shape gets no plan: its activations are learned from measured peaks instead.
"""

from __future__ import annotations

from engine.config.run_config import RunConfig
from engine.events import PlannedMemory
from engine.memory.capacity_plan import CPU_RUNTIME_BYTES, CUDA_CONTEXT_BYTES, PlanRequest, breakdown
from engine.memory.model_description import ModelDescription
from engine.memory.offload_setting import offload_setting

UNBOUNDED = 1 << 62  # the plan's capacity plays no part in the breakdown


def planned_memory(
    config: RunConfig, description: ModelDescription, world_size: int, device_type: str
) -> PlannedMemory | None:
    if description.shape is None:
        return None
    train = config.train
    request = PlanRequest(
        shape=description.shape,
        precision=train.precision,
        zero_stage=train.zero_stage,
        micro_batch=train.micro_batch,
        global_batch=train.global_batch,
        gpus_per_node=world_size,
        nodes=1,
        gpu_memory=UNBOUNDED,
        offload=offload_setting(config).offload,
        checkpointing=train.activation_checkpointing,
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
