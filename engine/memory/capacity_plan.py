"""The capacity plan: will a model train on these GPUs, at which ZeRO stage and micro-batch,
and how fast. What ``memtui plan`` prints; every figure comes from here.

Torch-free and pure: a ``PlanRequest`` (shape, precision, stage, offload, batch geometry,
the GPUs and the link between them) in, a ``Plan`` out. The formulas live in their own
modules (model states and activations: ``model``; FLOPs: ``flops``; communication:
``communication``); this module only combines them:

- per GPU: ``model states + micro_batch x activations per sample``, plus a named margin:
  the CUDA context (with cuBLAS workspaces and NCCL buffers; on the CPU the process's own
  resident runtime) and the caching allocator's slack, a share of the tensors;
- the largest micro-batch under the memory for every stage x offload row, and the
  recommendation: the cheapest row (lowest stage, no offload first: least communication,
  no host round trips) that holds the configured micro-batch;
- the step time at an assumed MFU: compute ``flops_per_token x tokens / (peak x MFU x
  GPUs)`` against the collectives' bytes over the interconnect and, with offload, the host
  traffic over PCIe; the three are taken to overlap, so the largest bounds the step. With
  the optimizer offloaded, DeepSpeed's CPU Adam then updates every shard on the host after
  the backward (it does not overlap the GPUs' work): its time is added to the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.memory.communication import LINKS, Link, comm_seconds, step_comm_bytes
from engine.memory.flops import TERA, flops_per_token
from engine.memory.model import (
    ELEMENT_BYTES,
    Offload,
    host_state_bytes,
    model_state_bytes,
    transformer_activation_bytes,
)
from engine.memory.transformer_shape import TransformerShape

GIB = 1 << 30
CPU_ADAM_PARAMS_PER_S = 1.0e9
"""Parameters DeepSpeed's CPU Adam (AVX2/AVX-512, every core of one node) updates per second:
an assumed round figure for a server CPU, measured on no host (this machine has no GPU to
offload from), to be replaced by a measurement on a lent one. The ranks of a node share its
CPU, so a node's time is its shards' parameters at this rate."""
CUDA_CONTEXT_BYTES = 1 * GIB
"""CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers per GPU (typically 0.5-1.5 GiB)."""
CPU_RUNTIME_BYTES = 420 << 20
"""On the CPU the 'context': a trainer process's resident Python, torch and DeepSpeed before
any tensor of the model (``bench/plan_accuracy.py`` measures the plan against real runs)."""
ALLOCATOR_SHARE = 0.10
"""Caching-allocator slack (fragmentation, rounding) as a share of the tensors' bytes."""
MAX_MICRO_BATCH = 65536  # the config's own bound
DEFAULT_MFU = 0.40
"""Assumed MFU for the expected step time: well-tuned dense training reaches 0.35-0.55."""
ROWS: tuple[tuple[int, Offload], ...] = (
    (0, "none"),
    (1, "none"),
    (2, "none"),
    (3, "none"),
    (2, "optimizer"),
    (3, "optimizer"),
    (3, "all"),
)
"""The table's rows in order of preference (communication and host traffic grow down it)."""


@dataclass(frozen=True)
class PlanRequest:
    """What a plan is made for."""

    shape: TransformerShape
    precision: str
    zero_stage: int
    micro_batch: int
    global_batch: int
    """Samples per optimizer step over all GPUs."""
    gpus_per_node: int
    nodes: int
    gpu_memory: int
    """Bytes per GPU."""
    offload: Offload = "none"
    checkpointing: bool = False
    """Activation checkpointing: each layer keeps only its input and recomputes the rest."""
    peak_tflops: float | None = None
    """One GPU's peak at ``precision``; None: no step-time estimate."""
    link: Link = LINKS["nvlink"]
    assumed_mfu: float = DEFAULT_MFU
    context_bytes: int = CUDA_CONTEXT_BYTES
    on_cpu: bool = False
    """Planned for memtui's CPU training, where fp16 matmuls run upcast to fp32
    (``engine/trainer/workloads/model.py``): its activations are counted at fp32."""

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def activation_precision(self) -> str:
        """The precision activations are kept in."""
        return "fp32" if self.on_cpu and self.precision == "fp16" else self.precision


@dataclass(frozen=True)
class Breakdown:
    """One GPU's bytes at the configured stage, offload and micro-batch."""

    params: int
    grads: int
    optimizer: int
    gathered: int
    """ZeRO-3: the largest layer's parameters gathered for compute."""
    activations_per_sample: int
    activations: int
    """``activations_per_sample x micro_batch``."""
    cuda_context: int
    allocator: int
    total: int
    capacity: int


@dataclass(frozen=True)
class Row:
    """One stage x offload configuration of the table."""

    zero_stage: int
    offload: Offload
    model_states: int
    """Bytes per GPU before activations."""
    largest_micro_batch: int
    """0: not even one sample fits."""
    per_gpu: int
    """Bytes per GPU at the micro-batch this row would run (the configured one, or its largest)."""
    host_bytes: int
    """Host memory per node for the offloaded states."""
    verdict: str
    step_s: float | None = None
    bound: str | None = None
    """What bounds the step: compute, interconnect or host (offload traffic)."""


@dataclass(frozen=True)
class Throughput:
    """The expected speed at the configured stage (or the recommended one if it does not fit)."""

    flops_per_token: float
    assumed_mfu: float
    peak_tflops: float
    tokens_per_step: int
    compute_s: float
    comm_bytes: int
    """Bytes each GPU sends per step over the interconnect."""
    comm_s: float
    host_bytes: int
    """Offload traffic per GPU and step over PCIe (gradients down, weights up)."""
    host_s: float
    step_s: float
    tokens_per_s: float
    bound: str
    cpu_optimizer_s: float = 0.0
    """The host's optimizer step with the optimizer offloaded (CPU Adam, after the backward:
    added to the step, not overlapped); 0 without offload."""


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    params: int
    largest_layer_params: int
    breakdown: Breakdown
    rows: list[Row]
    recommended: Row | None
    reason: str
    host_memory: int
    """Host bytes per node at the configured offload (0 without)."""
    throughput: Throughput | None
    grad_accum: int
    notes: list[str] = field(default_factory=list)


def activation_bytes(req: PlanRequest) -> int:
    s = req.shape
    return int(
        transformer_activation_bytes(
            s.seq_len,
            s.d_model,
            s.n_layer,
            s.n_head,
            s.vocab,
            req.activation_precision,
            req.checkpointing,
            ffn=s.ffn,
            gated=s.gated_mlp,
            kv_dim=s.kv_heads * s.head_dim,
        )
    )


def _states(req: PlanRequest, stage: int, offload: Offload) -> tuple[int, int, int, int]:
    s = req.shape
    states = model_state_bytes(s.params(), req.precision, stage, req.gpus, s.largest_layer_params(), offload)
    return states.params, states.grads, states.optimizer, states.gathered


def largest_micro_batch(req: PlanRequest, states: int, per_sample: int) -> int:
    """Most samples per micro-batch whose tensors, with the allocator's share, fit beside
    the context (0 when not one does)."""
    room = req.gpu_memory - req.context_bytes - states * (1 + ALLOCATOR_SHARE)
    if room <= 0:
        return 0
    if per_sample <= 0:
        return MAX_MICRO_BATCH
    return int(min(MAX_MICRO_BATCH, room // (per_sample * (1 + ALLOCATOR_SHARE))))


def per_gpu_bytes(req: PlanRequest, states: int, per_sample: int, micro_batch: int) -> int:
    tensors = states + per_sample * micro_batch
    return int(tensors * (1 + ALLOCATOR_SHARE)) + req.context_bytes


def grad_accum(req: PlanRequest, micro_batch: int) -> int:
    """Micro-batches per step that keep ``global_batch`` samples per step (at least 1)."""
    return max(1, -(-req.global_batch // (micro_batch * req.gpus)))


def breakdown(req: PlanRequest) -> Breakdown:
    params, grads, optimizer, gathered = _states(req, req.zero_stage, req.offload)
    per_sample = activation_bytes(req)
    activations = per_sample * req.micro_batch
    tensors = params + grads + optimizer + gathered + activations
    allocator = int(tensors * ALLOCATOR_SHARE)
    return Breakdown(
        params=params,
        grads=grads,
        optimizer=optimizer,
        gathered=gathered,
        activations_per_sample=per_sample,
        activations=activations,
        cuda_context=req.context_bytes,
        allocator=allocator,
        total=tensors + allocator + req.context_bytes,
        capacity=req.gpu_memory,
    )


def throughput(req: PlanRequest, stage: int, offload: Offload, micro_batch: int) -> Throughput | None:
    """Expected step time at ``assumed_mfu``; None without a peak."""
    if req.peak_tflops is None or micro_batch < 1:
        return None
    per_token = flops_per_token(req.shape)
    gas = grad_accum(req, micro_batch)
    tokens = micro_batch * gas * req.gpus * req.shape.seq_len
    compute = per_token * tokens / (req.peak_tflops * TERA * req.assumed_mfu * req.gpus)
    element = ELEMENT_BYTES.get(req.precision, 4)
    comm = step_comm_bytes(req.shape.params(), stage, req.gpus, gas, element)
    host = offload_traffic_bytes(req.shape.params(), req.gpus, gas, offload)
    comm_s, host_s = comm_seconds(comm, req.link), comm_seconds(host, LINKS["pcie"])
    overlapped = max(compute, comm_s, host_s)
    cpu_adam = cpu_optimizer_seconds(req.shape.params(), req.gpus, req.gpus_per_node, offload)
    step = overlapped + cpu_adam
    bound = "compute" if overlapped == compute else ("interconnect" if overlapped == comm_s else "host")
    if cpu_adam > overlapped:
        bound = "host optimizer"
    return Throughput(
        flops_per_token=per_token,
        assumed_mfu=req.assumed_mfu,
        peak_tflops=req.peak_tflops,
        tokens_per_step=tokens,
        compute_s=compute,
        comm_bytes=comm,
        comm_s=comm_s,
        host_bytes=host,
        host_s=host_s,
        step_s=step,
        tokens_per_s=tokens / step,
        bound=bound,
        cpu_optimizer_s=cpu_adam,
    )


def cpu_optimizer_seconds(params: int, gpus: int, gpus_per_node: int, offload: Offload) -> float:
    """The host's Adam step per optimizer step: each node updates its ranks' shards (every
    parameter once over the whole run's GPUs) at ``CPU_ADAM_PARAMS_PER_S``; 0 without offload."""
    if offload == "none":
        return 0.0
    per_node = params / max(1, gpus) * gpus_per_node
    return per_node / CPU_ADAM_PARAMS_PER_S


def offload_traffic_bytes(params: int, gpus: int, gas: int, offload: Offload) -> int:
    """Bytes per GPU and step between host and GPU: the gradient shard down and the updated
    16-bit weights up (2 bytes each per parameter of the shard); offloaded parameters are
    also fetched for forward and backward of every micro-batch."""
    if offload == "none":
        return 0
    shard = 2 * params // max(1, gpus)
    fetched = 2 * gas * shard if offload == "all" else 0
    return 2 * shard + fetched


def _row(req: PlanRequest, stage: int, offload: Offload, per_sample: int) -> Row:
    states = sum(_states(req, stage, offload))
    largest = largest_micro_batch(req, states, per_sample)
    micro = min(req.micro_batch, largest) if largest else req.micro_batch
    if largest >= req.micro_batch:
        verdict = "fits"
    elif largest:
        verdict = f"fits at micro-batch {largest}"
    else:
        verdict = "does not fit"
    speed = throughput(req, stage, offload, micro) if largest else None
    host = host_state_bytes(req.shape.params(), stage, offload, req.gpus_per_node, req.nodes)
    return Row(
        zero_stage=stage,
        offload=offload,
        model_states=states,
        largest_micro_batch=largest,
        per_gpu=per_gpu_bytes(req, states, per_sample, micro),
        host_bytes=host,
        verdict=verdict,
        step_s=None if speed is None else speed.step_s,
        bound=None if speed is None else speed.bound,
    )


def recommend(req: PlanRequest, rows: list[Row]) -> tuple[Row | None, str]:
    """The first row (in ``ROWS`` order) that holds the configured micro-batch, else the
    row that holds the most; with the reason in words."""
    for row in rows:
        if row.largest_micro_batch >= req.micro_batch:
            cheaper = "" if row is rows[0] else " (every cheaper row runs out of memory)"
            why = (
                f"the lowest ZeRO stage{' without offload' if row.offload == 'none' else ''} that holds "
                f"micro-batch {req.micro_batch}: least communication per step{cheaper}"
            )
            return row, why
    best = max(rows, key=lambda r: r.largest_micro_batch)
    if best.largest_micro_batch == 0:
        return None, (
            f"nothing fits on {req.gpus} x {req.gpu_memory / GIB:.0f} GiB, not even one sample at "
            "ZeRO-3 with everything offloaded: add GPUs, shorten the sequence or turn on checkpointing"
        )
    return best, (
        f"no row holds micro-batch {req.micro_batch}; this one holds the most "
        f"({best.largest_micro_batch}): keep the samples per step with more gradient accumulation"
    )


def make_plan(req: PlanRequest) -> Plan:
    if req.gpus < 1:
        raise ValueError(f"gpus: at least 1 GPU is needed (got {req.gpus})")
    if req.gpu_memory <= 0:
        raise ValueError(f"gpu_memory: must be positive (got {req.gpu_memory})")
    if req.offload != "none" and (req.zero_stage, req.offload) not in ROWS:
        need = "3" if req.offload == "all" else "2 or 3"
        raise ValueError(f"offload: {req.offload!r} needs ZeRO stage {need} (got stage {req.zero_stage})")
    per_sample = activation_bytes(req)
    rows = [_row(req, stage, offload, per_sample) for stage, offload in ROWS]
    chosen, reason = recommend(req, rows)
    configured = next(r for r in rows if (r.zero_stage, r.offload) == (req.zero_stage, req.offload))
    speed_row = configured if configured.largest_micro_batch else chosen
    speed = None
    if speed_row is not None:
        micro = min(req.micro_batch, speed_row.largest_micro_batch)
        speed = throughput(req, speed_row.zero_stage, speed_row.offload, micro)
    notes = []
    if configured is not speed_row and speed is not None:
        notes.append("the configured stage does not fit: the speed is the recommended row's")
    return Plan(
        request=req,
        params=req.shape.params(),
        largest_layer_params=req.shape.largest_layer_params(),
        breakdown=breakdown(req),
        rows=rows,
        recommended=chosen,
        reason=reason,
        host_memory=host_state_bytes(
            req.shape.params(), req.zero_stage, req.offload, req.gpus_per_node, req.nodes
        ),
        throughput=speed,
        grad_accum=grad_accum(req, req.micro_batch),
        notes=notes,
    )
