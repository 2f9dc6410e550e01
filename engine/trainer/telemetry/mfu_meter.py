"""MFU during the run: the model's FLOPs per token, the device's peak, and per step the
utilisation they give (``engine.memory.flops`` has the formulas).

FLOPs per token: the description of the model built (``engine.memory.model_description``):
6N plus the attention term from its shape (built-in, Hugging Face or declared), 6N alone
for a workload that declares none; N is the module's own count. The peak, for the run's
precision: ``[hardware] peak_tflops``, else memtui's table by the CUDA device's name, else
on the CPU a short matrix-multiply probe (labelled ``measured``: the CPU has no
datasheet figure memtui can trust), run by a run's first attempt on a host and kept in the
run directory (``CPU_PEAK_FILE``) for its restarts: a restart spends no half-second probing
before its first step, and MFU stays comparable across attempts. A step that beats the peak
gives no MFU (the console flags the peak as unreliable): an MFU is never above 100%. A GPU
the table does not know gives no MFU.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config.run_config import RunConfig
from engine.measures.utilisation import credible_mfu
from engine.memory.device_peaks import device_peak_of
from engine.memory.flops import TERA, mfu, model_tflops
from engine.memory.model_description import ModelDescription

log = logging.getLogger(__name__)

PROBE_SIZE = 512  # square matrices of the probe: 2 x 512^3 = 0.27 GFLOP each
PROBE_SECONDS = 0.5  # wall time the probe multiplies for in all (after one warm-up)
PROBE_ROUNDS = 5  # rounds apart in time: a burst of load spoils one, not the peak
CPU_PEAK_FILE = "cpu_peak.json"  # in the run directory: the probe's figure, for later attempts
PROBE_DTYPES = {"fp16": torch.float32, "bf16": torch.bfloat16, "fp32": torch.float32}
"""fp16 on the CPU multiplies in fp32 (engine/trainer/workloads/model.py), so its peak is fp32's."""


@dataclass(frozen=True)
class MfuMeter:
    flops_per_token: float
    peak_tflops: float | None
    """One device's peak at the run's precision; None: unknown (no MFU)."""
    peak_source: str
    """``config``, ``table (KEY)``, ``measured`` or ``unknown``."""
    devices: int

    def figures(self, tokens_per_s: float) -> dict[str, float | None]:
        """``mfu`` (a fraction; None above the peak, which the console flags) and
        ``model_tflops`` (all devices) for one step's tokens/s."""
        achieved = model_tflops(self.flops_per_token, tokens_per_s)
        if self.peak_tflops is None:
            return {"mfu": None, "model_tflops": achieved}
        utilisation = mfu(self.flops_per_token, tokens_per_s, self.peak_tflops, self.devices)
        return {"mfu": credible_mfu(utilisation), "model_tflops": achieved}


def build_meter(
    config: RunConfig,
    description: ModelDescription,
    device: torch.device | str,
    devices: int,
    kept: Path | None = None,
) -> MfuMeter:
    """``kept``: where a CPU probe's peak is kept for the run's later attempts (None: probe)."""
    peak, source = device_peak(config, torch.device(device), kept)
    return MfuMeter(description.flops_per_token(), peak, source, devices)


def device_peak(
    config: RunConfig, device: torch.device, kept: Path | None = None
) -> tuple[float | None, str]:
    precision = config.train.precision
    if config.hardware.peak_tflops:
        return config.hardware.peak_tflops, "config"
    if device.type == "cuda":
        return device_peak_of(torch.cuda.get_device_name(device), precision)
    if device.type == "cpu":
        return kept_cpu_peak(kept, precision), "measured"
    return None, "unknown"


def kept_cpu_peak(path: Path | None, precision: str) -> float:
    """The probe's peak as an earlier attempt of this run on this host, at this precision
    and thread count, kept it in ``path``; else probed now and kept there (best effort)."""
    key = {"precision": precision, "threads": torch.get_num_threads(), "host": socket.gethostname()}
    try:
        kept = json.loads(path.read_text(encoding="utf-8")) if path is not None else None
        if isinstance(kept, dict) and kept.get("key") == key and float(kept["tflops"]) > 0:
            log.info("CPU matmul peak: %.3f TFLOP/s, as probed by an earlier attempt", kept["tflops"])
            return float(kept["tflops"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none kept yet (or unreadable): probe
    peak = probe_cpu_peak(precision)
    if path is not None:
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            scratch.write_text(json.dumps({"key": key, "tflops": peak}), encoding="utf-8")
            os.replace(scratch, path)  # ranks of one host may write at once: whole files only
        except OSError as err:
            log.warning("could not keep the CPU peak in %s: %s", path, err)
    return peak


def probe_cpu_peak(precision: str) -> float:
    """TFLOP/s of square matmuls at the run's precision on this process's threads, the best
    of ``PROBE_ROUNDS`` short rounds spread over ``PROBE_SECONDS``.

    Each round times the fastest multiply on every thread and the fastest on one thread
    (times the threads): on a shared, loaded host some threads of a parallel multiply wait
    for a core, which under-measures the peak and would put MFU over 100%, while a
    single-threaded multiply short enough to run inside one time slice is rarely
    preempted. The best of both, over rounds apart in time, is the nearest to what the
    cores can do (an over-estimate at worst: MFU then reads low, never above the peak)."""
    dtype = PROBE_DTYPES.get(precision, torch.float32)
    # A generator of its own: the probe runs after a resume restored the checkpoint's RNG
    # state, and drawing from the global one would change every later dropout mask.
    own = torch.Generator().manual_seed(0)
    a = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=own).to(dtype)
    b = torch.randn(PROBE_SIZE, PROBE_SIZE, generator=own).to(dtype)
    threads = torch.get_num_threads()
    torch.mm(a, b)  # warm-up: thread pool, kernels
    best = 0.0
    try:
        for _ in range(PROBE_ROUNDS):
            torch.set_num_threads(threads)
            best = max(best, _fastest_tflops(a, b))
            torch.set_num_threads(1)
            best = max(best, threads * _fastest_tflops(a, b))
    finally:
        torch.set_num_threads(threads)
    log.info(
        "CPU matmul probe: %.3f TFLOP/s (%s, %d threads, best of %d rounds)",
        best,
        dtype,
        threads,
        PROBE_ROUNDS,
    )
    return best


def _fastest_tflops(a: torch.Tensor, b: torch.Tensor) -> float:
    """TFLOP/s of the fastest of the multiplies fitting in one round's half (at least one)."""
    fastest, count, start = float("inf"), 0, time.perf_counter()
    while time.perf_counter() - start < PROBE_SECONDS / PROBE_ROUNDS / 2 or count == 0:
        t = time.perf_counter()
        torch.mm(a, b)
        fastest = min(fastest, time.perf_counter() - t)
        count += 1
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / fastest / TERA
