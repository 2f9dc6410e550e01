"""How ``memtui plan`` prints a plan: as text for a person, or as one JSON document.

Only layout: every figure is computed in ``engine.memory.capacity_plan``. The JSON document's
keys are documented in docs/capacity.md (``memtui plan --json``). Torch-free.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from memtui.formatting import format_bytes

if TYPE_CHECKING:
    from engine.memory.capacity_plan import Plan, Row
    from memtui.cli.plan.plan_hardware import Hardware
    from memtui.cli.plan.plan_reality import Measured

OFFLOAD_WORDS = {"none": "no offload", "optimizer": "optimizer offload", "all": "optimizer+param offload"}


def plan_document(plan: Plan, hw: Hardware, measured: Measured | None) -> dict[str, Any]:
    req, shape = plan.request, plan.request.shape
    chosen = plan.recommended
    return {
        "model": {
            "source": shape.source,
            "params": plan.params,
            "largest_layer_params": plan.largest_layer_params,
            "n_layer": shape.n_layer,
            "d_model": shape.d_model,
            "n_head": shape.n_head,
            "kv_heads": shape.kv_heads,
            "ffn": shape.ffn,
            "seq_len": shape.seq_len,
            "vocab": shape.vocab,
        },
        "hardware": {
            "device": hw.name,
            "gpus": req.gpus,
            "gpus_per_node": req.gpus_per_node,
            "nodes": req.nodes,
            "gpu_memory": req.gpu_memory,
            "memory_source": hw.memory_source,
            "peak_tflops": req.peak_tflops,
            "peak_source": hw.peak_source,
            "interconnect": req.link.name,
            "bandwidth_gb_s": req.link.gb_per_s,
            "interconnect_source": hw.link_source,
            "interconnect_note": req.link.note,
        },
        "train": {
            "precision": req.precision,
            "zero_stage": req.zero_stage,
            "offload": req.offload,
            "micro_batch": req.micro_batch,
            "global_batch": req.global_batch,
            "grad_accum": plan.grad_accum,
            "activation_checkpointing": req.checkpointing,
        },
        "per_gpu": {**asdict(plan.breakdown), "fits": plan.breakdown.total <= plan.breakdown.capacity},
        "table": [asdict(row) for row in plan.rows],
        "recommendation": {
            "zero_stage": chosen.zero_stage if chosen else None,
            "offload": chosen.offload if chosen else None,
            "micro_batch": min(req.micro_batch, chosen.largest_micro_batch) if chosen else None,
            "reason": plan.reason,
        },
        "host_memory": plan.host_memory,
        "throughput": asdict(plan.throughput) if plan.throughput else None,
        "measured": asdict(measured) if measured else None,
        "notes": plan.notes,
    }


def print_plan(plan: Plan, hw: Hardware, measured: Measured | None) -> None:
    for line in plan_lines(plan, hw, measured):
        print(line)


def _row_name(row: Row) -> str:
    return f"ZeRO-{row.zero_stage}, {OFFLOAD_WORDS[row.offload]}"


def plan_lines(plan: Plan, hw: Hardware, measured: Measured | None) -> list[str]:
    req, shape, b = plan.request, plan.request.shape, plan.breakdown
    device = "CPU (host RAM shared by the ranks)" if hw.cpu else (hw.name or "GPU")
    peak = (
        f"{req.peak_tflops:g} TFLOP/s {req.precision} ({hw.peak_source})"
        if req.peak_tflops
        else "peak unknown"
    )
    lines = [
        f"model      {shape.source}: {plan.params / 1e6:,.1f} M parameters, {shape.n_layer} layers x "
        f"{shape.d_model}, {shape.n_head} heads, vocabulary {shape.vocab:,}, sequence {shape.seq_len:,}",
        f"hardware   {req.gpus_per_node} x {format_bytes(req.gpu_memory)} ({hw.memory_source}) x {req.nodes} "
        f"node(s), {device}, {peak}; {req.link.name} {req.link.gb_per_s:g} GB/s ({hw.link_source}: "
        f"{req.link.note})",
        f"training   {req.precision}, {_row_name_of(req.zero_stage, req.offload)}, "
        f"micro-batch {req.micro_batch} x {plan.grad_accum} accumulation x {req.gpus} GPUs, "
        "activation checkpointing "
        f"{'on' if req.checkpointing else 'off'}",
        "",
        f"per GPU at ZeRO-{req.zero_stage}, micro-batch {req.micro_batch}:",
        f"  parameters          {format_bytes(b.params):>10}",
        f"  gradients           {format_bytes(b.grads):>10}",
        f"  optimizer states    {format_bytes(b.optimizer):>10}",
        f"  gathered layer      {format_bytes(b.gathered):>10}   (ZeRO-3: the largest layer's parameters)",
        f"  activations         {format_bytes(b.activations):>10}   "
        f"({format_bytes(b.activations_per_sample)} per sample)",
        f"  {'runtime' if hw.cpu else 'CUDA context':<19} {format_bytes(b.cuda_context):>10}",
        f"  allocator slack     {format_bytes(b.allocator):>10}   (10% of the tensors)",
        f"  total               {format_bytes(b.total):>10}   of {format_bytes(b.capacity)}: "
        f"{'fits' if b.total <= b.capacity else 'does NOT fit'}",
        "",
        f"  {'stage x offload':<34} {'states':>10} {'largest mb':>10} {'per GPU':>10} {'host/node':>10} "
        f"{'step':>8}  bound          verdict",
    ]
    for row in plan.rows:
        step = f"{row.step_s:.3g} s" if row.step_s is not None else "—"
        lines.append(
            f"  {_row_name(row):<34} {format_bytes(row.model_states):>10} {row.largest_micro_batch:>10} "
            f"{format_bytes(row.per_gpu):>10} {format_bytes(row.host_bytes):>10} {step:>8}  "
            f"{row.bound or '—':<14} {row.verdict}"
        )
    lines += ["", _recommendation(plan)]
    if req.offload != "none":
        lines.append(f"host memory  {format_bytes(plan.host_memory)} per node for the offloaded states")
    lines += _speed(plan) + [f"note: {note}" for note in plan.notes]
    if measured is not None:
        lines.append(
            f"measured   run {measured.run}: peak {format_bytes(measured.measured_peak)} "
            f"({measured.memory_kind}{_ballast_words(measured.ballast)}) at step {measured.step}, "
            f"micro-batch {measured.micro_batch}; plan "
            f"{format_bytes(measured.predicted_peak)}: ratio {measured.ratio:.2f}"
        )
    return lines


def _ballast_words(ballast: int) -> str:
    return f", {format_bytes(ballast)} of chaos ballast left out" if ballast else ""


def _row_name_of(stage: int, offload: str) -> str:
    return f"ZeRO-{stage}, {OFFLOAD_WORDS[offload]}"


def _recommendation(plan: Plan) -> str:
    chosen = plan.recommended
    if chosen is None:
        return f"recommend  nothing: {plan.reason}"
    micro = min(plan.request.micro_batch, chosen.largest_micro_batch)
    return f"recommend  {_row_name(chosen)}, micro-batch {micro}: {plan.reason}"


def _speed(plan: Plan) -> list[str]:
    t = plan.throughput
    if t is None:
        return ["speed      unknown: no peak TFLOP/s for this device (give --gpu NAME or --peak-tflops)"]
    return [
        f"speed      {t.flops_per_token / 1e9:,.3g} GFLOP per token (6N + 12 x layers x seq x d_model), "
        f"{t.tokens_per_step:,} tokens per step, assumed MFU {t.assumed_mfu:.0%}",
        f"           compute {t.compute_s:.3g} s; interconnect {format_bytes(t.comm_bytes)} per GPU per step "
        f"= {t.comm_s:.3g} s; host traffic {format_bytes(t.host_bytes)} = {t.host_s:.3g} s"
        + (f"; then the host's Adam {t.cpu_optimizer_s:.3g} s (offloaded)" if t.cpu_optimizer_s else ""),
        f"           step {t.step_s:.3g} s, {t.tokens_per_s:,.0f} tokens/s: {t.bound}-bound",
    ]
