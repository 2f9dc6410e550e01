"""The built-in model: a byte-level decoder-only transformer (nanoGPT's shape).

Token + learned position embedding, ``n_layer`` pre-LN blocks of causal self-attention
(``F.scaled_dot_product_attention``) and a 4x GELU MLP, a final LayerNorm and a head tied
to the token embedding. ``forward(x, y)`` returns the mean cross-entropy in nats per byte,
so DeepSpeed's ``engine(x, y)`` is the loss.

With ``checkpointing`` (``train.activation_checkpointing``) each block keeps only its input
in forward and recomputes the rest in backward (``torch.utils.checkpoint``, non-reentrant:
it works under ZeRO-3's parameter hooks). The RNG state is saved with each block's input and
restored for the recompute, so dropout draws the same masks twice and a run's losses and
gradients match those of a run without checkpointing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from engine.config.run_config import ModelConfig

VOCAB_SIZE = 256  # one token per byte


def _cpu_half(x: torch.Tensor) -> bool:
    """fp16 on a CPU: PyTorch's CPU fp16 GEMM is ~50x slower than fp32 without AVX512-FP16."""
    return x.dtype == torch.float16 and x.device.type == "cpu"


class Linear(nn.Linear):
    """nn.Linear that, for fp16 on the CPU, multiplies in fp32 and returns fp16.

    Storage, activations between layers and gradients stay fp16 (so fp16 overflow and the
    loss scale behave as on a GPU, whose fp16 matmuls also accumulate in fp32); only the
    matmul is upcast.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _cpu_half(x):
            return super().forward(x)
        bias = None if self.bias is None else self.bias.float()
        return F.linear(x.float(), self.weight.float(), bias).to(x.dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
    """Causal SDPA over (batch, heads, time, head_dim); fp32 inside for fp16 on the CPU."""
    if not _cpu_half(q):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), dropout_p=dropout_p, is_causal=True)
    return y.to(q.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.qkv = Linear(config.d_model, 3 * config.d_model)
        self.proj = Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape  # (batch, time, channels)
        q, k, v = self.qkv(x).split(c, dim=2)
        # (b, t, c) -> (b, n_head, t, head_dim)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        drop = self.dropout if self.training else 0.0
        y = attention(q, k, v, dropout_p=drop)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.up = Linear(config.d_model, 4 * config.d_model)
        self.down = Linear(4 * config.d_model, config.d_model)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    """Pre-LN residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))


class ByteTransformer(nn.Module):
    def __init__(self, config: ModelConfig, checkpointing: bool = False) -> None:
        super().__init__()
        self.config = config
        self.checkpointing = checkpointing
        """Recompute each block in backward instead of keeping its activations."""
        self.tok_emb = nn.Embedding(VOCAB_SIZE, config.d_model)
        self.pos_emb = nn.Embedding(config.seq_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = Linear(config.d_model, VOCAB_SIZE, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: one (256, d_model) matrix
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer) so depth does not
        # grow the residual stream's variance.
        for name, p in self.named_parameters():
            if name.endswith(("proj.weight", "down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """x: int64 (batch, time) -> logits (batch, time, 256)."""
        pos = torch.arange(x.shape[1], device=x.device)
        h = self.drop(self.tok_emb(x) + self.pos_emb(pos))
        recompute = self.checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            # preserve_rng_state (the default): the recompute replays this forward's dropout
            h = checkpoint(block, h, use_reentrant=False) if recompute else block(h)
        return self.head(self.ln_f(h))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean next-byte cross-entropy in nats; x, y int64 (batch, time)."""
        logits = self.logits(x)
        return F.cross_entropy(logits.float().view(-1, VOCAB_SIZE), y.reshape(-1))


def parameter_count(model: nn.Module) -> int:
    """Distinct parameters (the tied head is counted once).

    Under ZeRO-3 a parameter's local tensor is an empty shard; ``ds_numel`` keeps its size.
    """
    return sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
