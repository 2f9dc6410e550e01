"""The predictive memory model: peak bytes per rank for a (micro-batch, sequence length).

Torch-free and pure. ``peak = baseline + activations(micro_batch, seq_len)``:

- ``model_states``: parameters, gradients and Adam's states by precision and ZeRO stage,
  the same accounting as DeepSpeed's ``estimate_zero2/3_model_states_mem_needs`` (checked
  against them in tests); the baseline before anything is measured.
- activations: bytes per sample from the transformer's shape (a prior; 0 for a workload we
  know nothing of), linear in the tokens of a micro-batch (micro-batch x padded sequence
  length: SDPA keeps no score matrix, so nothing is quadratic in the sequence), so a
  micro-batch of sequences twice as long is predicted as one twice as large.
- calibration from measured peaks: the baseline becomes ``measured - activations`` at the
  tokens measured (so outside pressure, a fragmenting allocator or the CPU's whole
  process RSS is in it at once), and two steps with different tokens per micro-batch (another
  micro-batch, or longer data) give the measured slope per token, which scales the
  activation prior (smoothed, clamped).

``Predictions`` is the controller's view of the model: predicted peaks per allowed
micro-batch, computed only for the sizes asked.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

Precision = Literal["fp16", "bf16", "fp32"]
Offload = Literal["none", "optimizer", "all"]
"""ZeRO-Offload: nothing, the optimizer states, or (stage 3) the parameters too."""

ELEMENT_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4}
SCALE_BOUNDS = (0.1, 10.0)  # calibration may scale the activation prior by this much at most
SCALE_SMOOTHING = 0.5  # weight of a new slope observation in the activation scale
HOST_BUFFER_FACTOR = 1.5  # DeepSpeed's estimators' additional_buffer_factor for host memory


@dataclass(frozen=True)
class ModelStates:
    """Per-rank bytes of the model states (no activations, no allocator slack)."""

    params: int
    grads: int
    optimizer: int
    """fp32 master weights (mixed precision) and Adam's two moments."""
    gathered: int = 0
    """ZeRO-3: the largest layer's parameters gathered for compute."""

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.gathered


def model_state_bytes(
    params: int,
    precision: str,
    zero_stage: int,
    world_size: int = 1,
    largest_layer_params: int = 0,
    offload: Offload = "none",
) -> ModelStates:
    """Adam model states per rank, DeepSpeed's accounting (bytes; ``params`` counted once).

    Mixed precision (fp16/bf16) per parameter: 2 (16-bit weights) + 2 (16-bit grads) +
    4 (fp32 grads) + 4 (fp32 master weights) + 8 (Adam m and v) = 20 bytes. ZeRO-1 splits
    the 16 optimizer bytes over the ranks, ZeRO-2 also the grads (DeepSpeed: 2P + 18P/N),
    ZeRO-3 everything (18P/N) plus the largest layer gathered (4 bytes per parameter).
    fp32: 4 (weights) + 4 (grads) + 8 (Adam) = 16 bytes, split the same way.

    ``offload`` (ZeRO-Offload, stage 2 or 3) moves the optimizer's bytes to the host
    (DeepSpeed: 2P on the device at stage 2; 4 x largest layer + 2P/N at stage 3), and
    ``"all"`` at stage 3 the 16-bit parameters too (only the gathered layer stays).
    """
    n = max(1, world_size)
    if offload != "none" and zero_stage >= 2:
        return _offloaded(params, zero_stage, n, largest_layer_params, offload)
    if precision == "fp32":
        weights, grads, optimizer = 4 * params, 4 * params, 8 * params
    else:
        weights, grads, optimizer = 2 * params, 2 * params, 16 * params  # fp32 grads with the states
    if zero_stage == 0:
        return ModelStates(weights, grads, optimizer)
    if zero_stage == 1:
        return ModelStates(weights, grads, optimizer // n)
    if zero_stage == 2:
        return ModelStates(weights, grads // n, optimizer // n)
    gathered = (4 if precision != "fp32" else 8) * largest_layer_params
    if precision == "fp32":
        return ModelStates(weights // n, grads // n, optimizer // n, gathered)
    # DeepSpeed's ZeRO-3 figure is 18P/N (its 16-bit grads are reduced into the fp32 ones).
    return ModelStates(weights // n, 0, optimizer // n, gathered)


def _offloaded(
    params: int, zero_stage: int, n: int, largest_layer_params: int, offload: Offload
) -> ModelStates:
    """Device bytes under ZeRO-Offload, as DeepSpeed's estimators count them (16-bit only)."""
    if zero_stage == 2:
        return ModelStates(2 * params, 0, 0)
    gathered = 4 * largest_layer_params
    if offload == "all":
        return ModelStates(0, 0, 0, gathered)
    return ModelStates(2 * params // n, 0, 0, gathered)


def host_state_bytes(
    params: int, zero_stage: int, offload: Offload, gpus_per_node: int = 1, nodes: int = 1
) -> int:
    """Host bytes per node for the offloaded states, DeepSpeed's estimators' figure with
    their 1.5x buffer factor (pinned buffers, the CPU Adam's working copies); 0 without
    offload. Stage 2: P x max(4 x GPUs, 16); stage 3 (zero.Init): 16P (optimizer) or 18P
    (optimizer and parameters) over the nodes."""
    if offload == "none" or zero_stage < 2:
        return 0
    per_param: float
    if zero_stage == 2:
        per_param = max(4 * gpus_per_node * nodes, 16)
    else:
        per_param = (18 if offload == "all" else 16) / max(1, nodes)
    return int(params * per_param * HOST_BUFFER_FACTOR)


def transformer_activation_bytes(
    seq_len: int,
    d_model: int,
    n_layer: int,
    n_head: int,
    vocab: int,
    precision: str,
    checkpointing: bool = False,
    *,
    ffn: int | None = None,
    gated: bool = False,
    kv_dim: int | None = None,
) -> float:
    """Activation bytes one sample keeps for backward in a GPT-style decoder.

    Per layer and token about 34 * d_model bytes at 16 bits for a 4x MLP with full attention
    heads (Korthikanti et al. 2022, no dropout masks), times 2 at fp32; no attention-score
    matrix (SDPA's fused kernels keep none; ``n_head`` is kept for a math-path variant). The
    17 elements per d_model scale with what each part saves (``layer_elements``): an MLP of
    width ``ffn`` (default 4 d_model) saves its input and two ``ffn``-wide tensors, four when
    ``gated`` (SwiGLU: gate, up, the activation and their product); attention saves its input,
    Q, the output projection's input and K and V of ``kv_dim`` each (default d_model; less
    with grouped-query attention). Plus, per token and vocabulary entry, the logits at the
    head (element bytes), their fp32 copy for the loss when they are 16-bit (4; at fp32
    ``.float()`` copies nothing) and the loss's fp32 log-softmax (4). With activation
    checkpointing each layer keeps only its input (d_model elements per token) and one
    layer's full activations live again while it is recomputed.
    """
    element = ELEMENT_BYTES.get(precision, 4)
    per_token_layer = layer_elements(d_model, ffn or 4 * d_model, gated, kv_dim or d_model) * element
    logits = vocab * (element + (4 if element < 4 else 0) + 4)
    if checkpointing:
        return float(seq_len * (n_layer * d_model * element + per_token_layer + logits))
    return float(seq_len * (n_layer * per_token_layer + logits))


def layer_elements(d_model: int, ffn: int, gated: bool, kv_dim: int) -> float:
    """Elements one layer saves per token for backward: 17 d_model for the 4x GELU MLP with
    full heads that the 34-bytes figure measured, scaled by what the parts save (two norm
    inputs 2d; attention 3d + 2 kv_dim; MLP d + 2 ffn, or d + 4 ffn gated: 16 d in all there)."""
    saved = 2 * d_model + 3 * d_model + 2 * kv_dim + d_model + (4 if gated else 2) * ffn
    return 17.0 * saved / 16.0


@dataclass
class MemoryModel:
    """Predicts the per-step peak; calibrated by ``observe`` after each measured step."""

    model_states: int
    """Bytes of the model states (see model_state_bytes)."""
    per_sample: float
    """Prior activation bytes per sample at ``seq_len``; 0 when unknown (then learned)."""
    seq_len: int
    """Sequence length the prior was computed for (tokens)."""
    scale: float = 1.0
    """Calibration: measured activation slope / prior."""
    baseline: int | None = None
    """Calibrated bytes that do not grow with the micro-batch; None until measured."""
    _last: tuple[int, int] | None = field(default=None, repr=False)
    """(tokens per micro-batch, measured peak) of the previous observation."""
    _resident: int | None = field(default=None, repr=False)
    """Bytes resident at the step boundary when the baseline was last set."""

    def slope(self, seq_len: int | None = None) -> float:
        """Bytes per sample at ``seq_len`` (activations taken as linear in it: a bound for
        shorter sequences, an under-estimate for longer ones with quadratic attention)."""
        ratio = 1.0 if seq_len is None else seq_len / self.seq_len
        return self.per_sample * self.scale * ratio

    @property
    def per_token(self) -> float:
        """Calibrated activation bytes per token of a micro-batch."""
        return self.per_sample * self.scale / self.seq_len

    def predict(self, micro_batch: int, seq_len: int | None = None) -> int:
        """Peak bytes per rank for one forward+backward of ``micro_batch`` samples of
        ``seq_len`` tokens (padded length; None: the prior's ``seq_len``)."""
        return self.predict_tokens(micro_batch * (seq_len or self.seq_len))

    def predict_tokens(self, tokens: int) -> int:
        """Peak bytes per rank for a micro-batch of ``tokens`` (samples x padded length)."""
        base = self.model_states if self.baseline is None else self.baseline
        return int(base + self.per_token * tokens)

    def observe(
        self, micro_batch: int, measured_peak: int, resident: int | None = None, seq_len: int | None = None
    ) -> None:
        """Calibrate from one step's measured peak (bytes) at ``micro_batch`` samples of
        ``seq_len`` tokens (None: the prior's); ``resident`` is what stayed allocated at the
        step's end (see ``drift``)."""
        tokens = micro_batch * (seq_len or self.seq_len)
        last, self._last = self._last, (tokens, measured_peak)
        if last is not None and last[0] != tokens:
            per_token = (measured_peak - last[1]) / (tokens - last[0])
            self._fit_slope(per_token * self.seq_len)  # the prior's unit: bytes per sample at seq_len
        self.baseline = max(0, int(measured_peak - self.per_token * tokens))
        self._resident = resident

    def seed(self, resident: int) -> None:
        """Before any step is measured: what is resident now (the process's RSS on the CPU,
        the allocator's bytes on CUDA) is a floor for the baseline."""
        if self.baseline is None:
            self.baseline = max(self.model_states, resident)
            self._resident = resident

    def drift(self, resident: int) -> None:
        """Memory resident now at a step boundary: what came or went since the last step
        (another tenant, a cache, injected ballast) moves the baseline by as much."""
        if self.baseline is None or self._resident is None:
            return
        moved = resident - self._resident
        self.baseline = max(0, self.baseline + moved)
        self._resident = resident
        if self._last is not None:  # so the next slope compares like with like (no ballast step)
            self._last = (self._last[0], self._last[1] + moved)

    def _fit_slope(self, observed: float) -> None:
        if observed <= 0:
            return  # noise (or outside memory freed at the same time): keep what we have
        if self.per_sample <= 0:
            self.per_sample, self.scale = observed, 1.0  # nothing known: learn it
            return
        target = observed / self.per_sample
        lo, hi = SCALE_BOUNDS
        blended = (1 - SCALE_SMOOTHING) * self.scale + SCALE_SMOOTHING * target
        self.scale = min(hi, max(lo, blended))


class Predictions(Mapping[int, int]):
    """Predicted peak (bytes) per allowed micro-batch at the coming step's sequence length,
    computed only for the keys asked.

    The controller looks at one or two candidates per step (the next larger; the smaller
    ones when shrinking), so a dict of every candidate would be O(candidates) per step.
    """

    def __init__(self, model: MemoryModel, allowed: tuple[int, ...]) -> None:
        self.model = model
        self.allowed = allowed  # ascending
        self.seq_len: int | None = None
        """Tokens per sample of the coming step (its padded length); None: the model's."""

    def __getitem__(self, micro_batch: int) -> int:
        i = bisect_left(self.allowed, micro_batch)
        if i == len(self.allowed) or self.allowed[i] != micro_batch:
            raise KeyError(micro_batch)
        return self.model.predict(micro_batch, self.seq_len)

    def __iter__(self) -> Iterator[int]:
        return iter(self.allowed)

    def __len__(self) -> int:
        return len(self.allowed)
