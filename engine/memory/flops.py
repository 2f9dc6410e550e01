"""Model FLOPs: per token from the transformer's shape, and the utilisation (MFU) they give.

Torch-free and pure. FLOPs per token of one training step (forward + backward), as PaLM
(Chowdhery et al. 2022, appendix B) and nanoGPT's ``estimate_mfu`` count them::

    flops_per_token = 6 * N + 12 * n_layer * seq_len * d_model

``6N``: every weight a token passes through costs one multiply-add (2 FLOPs) forward and
two backward; N counts the matrices a token multiplies through: every parameter except the
lookups, a learned position embedding and, where the head is not tied to it, the token
embedding (a tied one is the head's matrix, which every token multiplies through). Counting
an untied token embedding put LLaMA-2-7B 2% high and a small LLaMA with a large vocabulary
far higher. ``12 * n_layer * seq_len * d_model``: the
attention scores and their weighted sum (QK^T and AV, 2 x 2 x seq_len x d_model forward
per layer, times 3 with backward). Activation recomputation is not counted: MFU counts the
model's FLOPs, not the hardware's (that would be HFU).

    mfu = flops_per_token x tokens/s / (peak FLOP/s per device x devices)
"""

from __future__ import annotations

from engine.memory.transformer_shape import TransformerShape

TERA = 1e12


def matmul_params(shape: TransformerShape) -> int:
    """N of ``6N``: the parameters that take part in a matrix multiply per token."""
    lookups = shape.learned_positions + (0 if shape.tied_head else shape.vocab)
    return shape.params() - lookups * shape.d_model


def flops_per_token(shape: TransformerShape) -> float:
    """Training FLOPs (forward + backward) per token: 6N plus the attention term."""
    attention = 12 * shape.n_layer * shape.seq_len * shape.d_model
    return float(6 * matmul_params(shape) + attention)


def dense_flops_per_token(params: int) -> float:
    """6N alone, for a workload whose shape is unknown (a user's model)."""
    return 6.0 * params


def model_tflops(flops_per_token: float, tokens_per_s: float) -> float:
    """Achieved model TFLOP/s of the whole run (all devices together)."""
    return flops_per_token * tokens_per_s / TERA


def mfu(flops_per_token: float, tokens_per_s: float, peak_tflops: float, devices: int = 1) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the devices' peak (a fraction)."""
    if peak_tflops <= 0 or devices < 1:
        raise ValueError(f"peak_tflops ({peak_tflops}) and devices ({devices}) must be positive")
    return model_tflops(flops_per_token, tokens_per_s) / (peak_tflops * devices)


def tokens_per_s_at(flops_per_token: float, peak_tflops: float, devices: int, assumed_mfu: float) -> float:
    """Tokens/s the devices reach at ``assumed_mfu`` (the inverse of ``mfu``)."""
    return assumed_mfu * peak_tflops * TERA * devices / flops_per_token
