"""Bytes each GPU sends per optimizer step for a ZeRO stage, and the links that carry them.

Torch-free and pure. Ring collectives over N ranks: an all-reduce of B bytes sends
2B(N-1)/N per rank, a reduce-scatter or an all-gather B(N-1)/N (ZeRO, Rajbhandari et al.
2020, section 7). With P parameters of ``element`` bytes (16-bit gradients: 2):

- stage 0 and 1: one gradient all-reduce per step, 2P(N-1)/N elements;
- stage 2: a gradient reduce-scatter after every micro-batch (the full gradient is not
  kept) and one parameter all-gather after the step, (grad_accum + 1) P(N-1)/N;
- stage 3: per micro-batch, the parameters gathered for forward and again for backward
  and the gradients reduce-scattered, 3P(N-1)/N each micro-batch.

Compute and communication are taken to overlap, so the slower of the two bounds the step.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9  # link bandwidths are quoted in decimal GB/s


@dataclass(frozen=True)
class Link:
    """An interconnect's bandwidth per GPU, one direction, as collectives can use it."""

    name: str
    gb_per_s: float
    """Decimal GB/s."""
    note: str


LINKS: dict[str, Link] = {
    "pcie": Link("pcie", 25.0, "PCIe 4.0 x16: 32 GB/s raw, about 25 GB/s achieved"),
    "pcie5": Link("pcie5", 50.0, "PCIe 5.0 x16: 64 GB/s raw, about 50 GB/s achieved"),
    "nvlink": Link("nvlink", 300.0, "NVLink 3 (A100): 300 GB/s per GPU each way"),
    "nvlink4": Link("nvlink4", 450.0, "NVLink 4 (H100, H200): 450 GB/s per GPU each way"),
    "infiniband": Link("infiniband", 25.0, "InfiniBand HDR, one 200 Gb/s NIC per GPU: 25 GB/s"),
    "ethernet": Link("ethernet", 12.5, "100 Gb Ethernet per node: 12.5 GB/s"),
    "shared-memory": Link("shared-memory", 10.0, "CPU ranks on one host: gloo through shared memory"),
}


NVLINK4_GPUS = ("h100", "h200", "h800", "gh200")


def default_link(nodes: int, device_name: str | None = None) -> Link:
    """Within one node NVLink (a data-centre 8-GPU server: NVLink 4 for Hopper GPUs);
    across nodes the network."""
    if nodes > 1:
        return LINKS["infiniband"]
    hopper = device_name is not None and any(g in device_name.lower() for g in NVLINK4_GPUS)
    return LINKS["nvlink4"] if hopper else LINKS["nvlink"]


def step_comm_bytes(params: int, zero_stage: int, world_size: int, grad_accum: int, element: int) -> int:
    """Bytes one rank sends per optimizer step (0 on a single rank)."""
    if world_size <= 1:
        return 0
    share = params * element * (world_size - 1) / world_size  # one reduce-scatter or all-gather
    if zero_stage <= 1:
        passes = 2.0
    elif zero_stage == 2:
        passes = grad_accum + 1.0
    else:
        passes = 3.0 * grad_accum
    return int(passes * share)


def comm_seconds(comm_bytes: int, link: Link) -> float:
    """Seconds the link needs for ``comm_bytes`` at its bandwidth."""
    return comm_bytes / (link.gb_per_s * GB)
