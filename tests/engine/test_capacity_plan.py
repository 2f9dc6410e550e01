"""The capacity plan, FLOPs and MFU, without torch: parameter counts of known models, the
plan's table and recommendation, communication volumes, the peak table."""

from __future__ import annotations

import pytest

from engine.memory.capacity_plan import CPU_ADAM_PARAMS_PER_S, GIB, PlanRequest, make_plan
from engine.memory.communication import LINKS, step_comm_bytes
from engine.memory.device_peaks import find_peak, peak_tflops
from engine.memory.flops import flops_per_token, mfu, model_tflops, tokens_per_s_at
from engine.memory.model import host_state_bytes, model_state_bytes
from engine.memory.transformer_shape import ShapeError, from_hf_config, from_model_config

LLAMA_7B = {
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}
GPT2 = {
    "model_type": "gpt2",
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}


def _request(stage: int, **kw: object) -> PlanRequest:
    base: dict[str, object] = dict(
        shape=from_hf_config(LLAMA_7B, "llama"),
        precision="bf16",
        zero_stage=stage,
        micro_batch=1,
        global_batch=64,
        gpus_per_node=8,
        nodes=1,
        gpu_memory=80 * GIB,
        peak_tflops=989.4,
    )
    base.update(kw)
    return PlanRequest(**base)  # type: ignore[arg-type]


def test_parameter_counts_of_known_models() -> None:
    assert from_hf_config(LLAMA_7B, "x").params() == 6_738_415_616  # LLaMA-2-7B, as HF counts it
    assert from_hf_config(GPT2, "x").params() == 124_439_808  # GPT-2 small, tied head
    tiny = from_model_config(n_layer=2, n_head=4, d_model=64, seq_len=128)
    assert tiny.params() == (256 + 128) * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64


def test_6n_counts_no_lookup() -> None:
    from engine.memory.flops import matmul_params

    llama = from_hf_config(LLAMA_7B, "x")  # untied: its token embedding is a lookup
    assert matmul_params(llama) == 6_738_415_616 - 32000 * 4096
    gpt2 = from_hf_config(GPT2, "x")  # tied: the embedding is the head's matrix; positions are a lookup
    assert matmul_params(gpt2) == 124_439_808 - 1024 * 768


def test_hf_config_without_a_shape_key_names_it() -> None:
    with pytest.raises(ShapeError, match="hidden_size or n_embd or d_model"):
        from_hf_config({"num_hidden_layers": 2}, "m/config.json")


def test_7b_on_8x80gb_fits_from_zero_1_and_recommends_the_cheapest() -> None:
    plan = make_plan(_request(3))
    verdicts = {(r.zero_stage, r.offload): r for r in plan.rows}
    assert verdicts[(0, "none")].largest_micro_batch == 0  # 20 bytes x 6.7 B = 126 GiB per GPU
    assert verdicts[(1, "none")].largest_micro_batch >= 1
    # stage 3 partitions the parameters too: fewer state bytes, room for at least as many samples
    # (LLaMA's gated MLP keeps more a sample than a 4x GELU one: here the room gained is less than one)
    assert verdicts[(3, "none")].model_states < verdicts[(2, "none")].model_states
    assert verdicts[(3, "none")].largest_micro_batch >= verdicts[(2, "none")].largest_micro_batch
    assert plan.recommended is verdicts[(1, "none")] and "lowest ZeRO stage" in plan.reason
    b = plan.breakdown
    assert (
        b.total
        == b.params + b.grads + b.optimizer + b.gathered + b.activations + b.cuda_context + b.allocator
    )
    assert b.gathered == 4 * plan.largest_layer_params and b.total <= b.capacity


def test_nothing_fits_says_so() -> None:
    plan = make_plan(_request(3, gpus_per_node=1, gpu_memory=8 * GIB))
    assert plan.recommended is None and "nothing fits" in plan.reason


def test_larger_micro_batch_than_any_row_holds_recommends_the_roomiest() -> None:
    plan = make_plan(_request(3, micro_batch=64, global_batch=512))
    assert plan.recommended is not None and "no row holds micro-batch 64" in plan.reason
    assert plan.recommended.largest_micro_batch == max(r.largest_micro_batch for r in plan.rows)


def test_offload_needs_stage_2_or_3() -> None:
    with pytest.raises(ValueError, match="offload"):
        make_plan(_request(1, offload="optimizer"))
    with pytest.raises(ValueError, match="stage 3"):
        make_plan(_request(2, offload="all"))


def test_checkpointing_shrinks_activations() -> None:
    plain, ckpt = make_plan(_request(3)), make_plan(_request(3, checkpointing=True))
    assert ckpt.breakdown.activations_per_sample < plain.breakdown.activations_per_sample / 5


def test_offload_states_and_host_memory_follow_deepspeeds_formulas() -> None:
    p, largest = 1_000_000_000, 50_000_000
    assert model_state_bytes(p, "fp16", 2, 8, offload="optimizer").total == 2 * p
    assert model_state_bytes(p, "fp16", 3, 8, largest, offload="optimizer").total == 4 * largest + 2 * p // 8
    assert model_state_bytes(p, "fp16", 3, 8, largest, offload="all").total == 4 * largest
    assert host_state_bytes(p, 2, "optimizer", gpus_per_node=8) == int(p * 32 * 1.5)  # max(4 x 8, 16)
    assert host_state_bytes(p, 3, "optimizer", gpus_per_node=8, nodes=2) == int(p * 8 * 1.5)  # 16/2
    assert host_state_bytes(p, 3, "all", gpus_per_node=8) == int(p * 18 * 1.5)
    assert host_state_bytes(p, 1, "none") == 0


def test_communication_per_stage() -> None:
    p = 1_000_000
    assert step_comm_bytes(p, 0, 1, 4, 2) == 0  # one rank sends nothing
    share = 2 * p * 3 / 4  # one reduce-scatter of 16-bit grads over 4 ranks
    assert step_comm_bytes(p, 1, 4, 4, 2) == int(2 * share)
    assert step_comm_bytes(p, 2, 4, 4, 2) == int(5 * share)  # 4 reduce-scatters + 1 all-gather
    assert step_comm_bytes(p, 3, 4, 4, 2) == int(12 * share)  # 3 per micro-batch


def test_a_slow_link_bounds_the_step() -> None:
    fast = make_plan(_request(3, micro_batch=2, global_batch=16, nodes=2))
    slow = make_plan(_request(3, micro_batch=2, global_batch=16, nodes=2, link=LINKS["ethernet"]))
    assert fast.throughput is not None and slow.throughput is not None
    assert slow.throughput.bound == "interconnect" and slow.throughput.step_s > fast.throughput.step_s
    assert make_plan(_request(3, peak_tflops=None)).throughput is None


def test_mfu_arithmetic_on_a_known_case() -> None:
    # 1e9 parameters: 6e9 FLOPs per token; 1000 tokens/s = 6 TFLOP/s of a 60 TFLOP/s device.
    assert model_tflops(6e9, 1000) == pytest.approx(6.0)
    assert mfu(6e9, 1000, peak_tflops=60.0) == pytest.approx(0.10)
    assert mfu(6e9, 1000, peak_tflops=30.0, devices=2) == pytest.approx(0.10)
    assert tokens_per_s_at(6e9, 60.0, 1, 0.10) == pytest.approx(1000)
    tiny = from_model_config(n_layer=2, n_head=4, d_model=64, seq_len=128)
    n = tiny.params() - 128 * 64  # position embedding: a lookup, no FLOPs
    assert flops_per_token(tiny) == 6 * n + 12 * 2 * 128 * 64
    with pytest.raises(ValueError):
        mfu(1.0, 1.0, peak_tflops=0)


@pytest.mark.parametrize(
    ("name", "precision", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 PCIe", "fp16", 756.0),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA GeForce RTX 4090", "fp32", 82.6),
        ("NVIDIA L40S", "fp16", 362.1),
        ("NVIDIA L4", "fp16", 121.0),
        ("Tesla V100-SXM2-32GB", "bf16", None),  # no bf16 tensor cores
        ("NVIDIA B200", "bf16", 2250.0),
        ("NVIDIA GB200", "bf16", 2500.0),
        ("NVIDIA GeForce RTX 5090", "fp16", 209.5),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "bf16", 503.8),
        ("NVIDIA H200 NVL", "bf16", 835.5),
        ("NVIDIA H200", "bf16", 989.4),
        ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "bf16", 312.0 * 3 / 7),  # a slice's share
        ("NVIDIA A30 MIG 1g.6gb", "fp16", 165.0 / 4),
    ],
)
def test_peak_table_by_nvml_name(name: str, precision: str, peak: float | None) -> None:
    assert peak_tflops(name, precision) == peak


def test_unknown_device_has_no_peak() -> None:
    assert find_peak("Imaginary Accelerator 9000") is None


@pytest.mark.parametrize(
    ("name", "link", "gb_per_s"),
    [
        ("NVIDIA H100 80GB HBM3", "nvlink4", 450.0),
        ("NVIDIA H100 PCIe", "pcie5", 50.0),  # no NVLink on the PCIe card (was NVLink 4)
        ("NVIDIA GeForce RTX 5090", "pcie5", 50.0),  # was NVLink 3's 300 GB/s
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "pcie5", 50.0),
        ("NVIDIA B200", "nvlink5", 900.0),  # was NVLink 3's 300 GB/s
        ("NVIDIA GB200", "nvlink5", 900.0),
        ("NVIDIA A100-SXM4-80GB", "nvlink", 300.0),
        ("NVIDIA A100-PCIE-40GB", "pcie", 25.0),
        ("Imaginary Accelerator 9000", "pcie", 25.0),  # unknown: PCIe 4, not NVLink
    ],
)
def test_the_link_within_a_node_is_the_model_s(name: str, link: str, gb_per_s: float) -> None:
    from engine.memory.communication import default_link

    assert (default_link(1, name).name, default_link(1, name).gb_per_s) == (link, gb_per_s)
    assert default_link(2, name).name == "infiniband"


def test_the_link_nvml_sees_wins_over_the_table() -> None:
    from engine.memory.communication import seen_link

    assert seen_link(18, 5, 16, "NVIDIA H100 80GB HBM3").name == "nvlink4"
    assert seen_link(4, 4, 16, "Imaginary Accelerator 9000").name == "nvlink"  # NVLink up, model unknown
    narrow = seen_link(0, 4, 8, "NVIDIA H100 80GB HBM3")  # an H100 whose NVLinks are down, PCIe 4 x8
    assert (narrow.name, narrow.gb_per_s) == ("pcie4", 12.5)
    assert seen_link(0, 5, 16, "NVIDIA GeForce RTX 5090").gb_per_s == 50.0


@pytest.mark.parametrize(
    ("name", "bf16", "gib"),
    [
        ("NVIDIA GeForce RTX 5080", 112.6, 16),
        ("NVIDIA GeForce RTX 5070 Ti", 87.9, 16),
        ("NVIDIA B300 SXM6 AC", 2250.0, 288),
        ("NVIDIA GB300", 2500.0, 288),
        ("NVIDIA GB10", 125.0, 128),
    ],
)
def test_the_seed_s_newer_cards_have_peaks_and_memory(name: str, bf16: float, gib: int) -> None:
    from engine.memory.device_peaks import memory_from_name

    assert peak_tflops(name, "bf16") == bf16
    assert memory_from_name(name) == gib * 1024**3


def test_memory_from_the_name_where_a_model_has_several_sizes() -> None:
    from engine.memory.device_peaks import memory_from_name

    assert memory_from_name("NVIDIA A100-SXM4-40GB") == 40 * 1024**3
    assert memory_from_name("NVIDIA A100") is None  # 40 or 80: the plan asks for --gpu-memory
    assert memory_from_name("Imaginary Accelerator 9000") is None


def test_cpu_plans_count_fp16_activations_at_fp32() -> None:
    """memtui's CPU training multiplies fp16 upcast to fp32: its activations are fp32's."""
    tiny = from_model_config(n_layer=2, n_head=4, d_model=64, seq_len=128)
    gpu = make_plan(_request(0, shape=tiny, precision="fp16", gpus_per_node=1, peak_tflops=None))
    cpu = make_plan(_request(0, shape=tiny, precision="fp16", gpus_per_node=1, peak_tflops=None, on_cpu=True))
    fp32 = make_plan(_request(0, shape=tiny, precision="fp32", gpus_per_node=1, peak_tflops=None))
    assert cpu.breakdown.activations_per_sample == fp32.breakdown.activations_per_sample
    assert cpu.breakdown.activations_per_sample > gpu.breakdown.activations_per_sample
    assert cpu.breakdown.params == gpu.breakdown.params  # the states stay 16-bit


def test_an_offloaded_optimizer_adds_the_hosts_adam_step() -> None:
    """LLaMA-2-7B, ZeRO-2 on 8 x H100: the optimizer offloaded to the host plans slower than
    on the GPUs, by its CPU Adam step over the node's shards (on 3d41152 the two were equal)."""
    on_gpus = make_plan(_request(2, global_batch=512)).throughput
    offloaded = make_plan(_request(2, global_batch=512, offload="optimizer")).throughput
    assert on_gpus is not None and offloaded is not None
    assert on_gpus.cpu_optimizer_s == 0.0
    assert offloaded.cpu_optimizer_s == pytest.approx(
        6_738_415_616 / CPU_ADAM_PARAMS_PER_S
    )  # 8 shards, 1 node
    assert offloaded.step_s >= on_gpus.step_s + offloaded.cpu_optimizer_s * 0.999
    two_nodes = make_plan(_request(2, global_batch=512, offload="optimizer", nodes=2)).throughput
    assert two_nodes is not None and two_nodes.cpu_optimizer_s == pytest.approx(offloaded.cpu_optimizer_s / 2)
    small_batch = make_plan(_request(2, global_batch=8, offload="optimizer")).throughput
    assert small_batch is not None and small_batch.bound == "host optimizer"
