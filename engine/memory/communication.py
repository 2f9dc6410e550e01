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
    "pcie3": Link("pcie3", 12.0, "PCIe 3.0 x16: 16 GB/s raw, about 12 GB/s achieved"),
    "pcie": Link("pcie", 25.0, "PCIe 4.0 x16: 32 GB/s raw, about 25 GB/s achieved"),
    "pcie5": Link("pcie5", 50.0, "PCIe 5.0 x16: 64 GB/s raw, about 50 GB/s achieved"),
    "nvlink2": Link("nvlink2", 150.0, "NVLink 2 (V100 SXM2): 150 GB/s per GPU each way"),
    "nvlink-export": Link("nvlink-export", 200.0, "NVLink as cut for A800/H800: 200 GB/s per GPU each way"),
    "nvlink": Link("nvlink", 300.0, "NVLink 3 (A100): 300 GB/s per GPU each way"),
    "nvlink4": Link("nvlink4", 450.0, "NVLink 4 (H100, H200): 450 GB/s per GPU each way"),
    "nvlink5": Link("nvlink5", 900.0, "NVLink 5 (B200, GB200, B300): 900 GB/s per GPU each way"),
    "infiniband": Link("infiniband", 25.0, "InfiniBand HDR, one 200 Gb/s NIC per GPU: 25 GB/s"),
    "ethernet": Link("ethernet", 12.5, "100 Gb Ethernet per node: 12.5 GB/s"),
    "shared-memory": Link("shared-memory", 10.0, "CPU ranks on one host: gloo through shared memory"),
}
PCIE_X16_GB_PER_S = {3: 12.0, 4: 25.0, 5: 50.0, 6: 100.0}
"""Achieved GB/s one way of a x16 PCIe link by generation (about 80% of the raw rate)."""


def default_link(nodes: int, device_name: str | None = None) -> Link:
    """Across nodes the network; within one node the device table's link by model
    (``engine.memory.device_peaks``), PCIe 4 for a device it does not know."""
    from engine.memory.device_peaks import find_peak

    if nodes > 1:
        return LINKS["infiniband"]
    entry = find_peak(device_name) if device_name else None
    return LINKS[entry.link] if entry is not None else LINKS["pcie"]


def seen_link(nvlinks_active: int, pcie_gen: int, pcie_width: int, device_name: str | None) -> Link:
    """The link within a node from what NVML says of device 0: NVLink when any of its links is
    active (the table's generation for the model, else NVLink 3), else its PCIe link at the
    generation and width it trains at."""
    from engine.memory.device_peaks import find_peak

    if nvlinks_active > 0:
        entry = find_peak(device_name) if device_name else None
        nvlink = entry.link if entry is not None and entry.link.startswith("nvlink") else "nvlink"
        return LINKS[nvlink]
    per_lane = PCIE_X16_GB_PER_S.get(pcie_gen, 25.0) / 16
    speed = per_lane * max(pcie_width, 1)
    return Link(
        f"pcie{pcie_gen}", speed, f"PCIe {pcie_gen}.0 x{pcie_width} as NVML sees it: about {speed:g} GB/s"
    )


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
