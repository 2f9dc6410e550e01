"""A decoder-only transformer's shape, and the parameter counts that follow from it.

Torch-free and pure: the capacity plan and the MFU figure need the number of parameters
before (or without) building the model. Two sources: the built-in byte-level model
(``engine.config.run_config.ModelConfig``; ``engine/trainer/workloads/model.py`` builds the same shape, and a
test holds the two counts equal) and a Hugging Face ``config.json`` (GPT-2 and
LLaMA-style keys; the caller reads the file, ``from_hf_config`` reads its dict).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BYTE_VOCAB = 256  # the built-in model's vocabulary: one token per byte
GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu", "geglu"})
"""HF ``hidden_act`` values whose MLP has three matrices (gate, up, down)."""


class ShapeError(ValueError):
    """A model description that names no usable shape; the message names the key."""


@dataclass(frozen=True)
class TransformerShape:
    """Everything the memory and FLOP formulas need (sizes in elements, not bytes)."""

    n_layer: int
    d_model: int
    n_head: int
    seq_len: int
    """Tokens per sample the plan is made for."""
    vocab: int
    ffn: int
    """MLP hidden width (4 x d_model for GPT-style models)."""
    kv_heads: int
    """Key/value heads (grouped-query attention); n_head when not grouped."""
    gated_mlp: bool = False
    """Gate, up and down matrices (LLaMA's SwiGLU) instead of up and down."""
    biases: bool = True
    """Linear layers carry biases (GPT-2 and the built-in model do, LLaMA does not)."""
    learned_positions: int = 0
    """Rows of a learned position embedding (0: rotary or none)."""
    tied_head: bool = True
    """The output head shares the token embedding's matrix."""
    source: str = "built-in"
    """Where the shape came from: ``built-in`` or a config.json's path."""
    counted_params: int | None = None
    """Parameters counted from the built module; when given it wins over the formula
    (``params``), which a model with extra parts (an unusual head, adapters) would miss."""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def layer_params(self) -> int:
        """Parameters of one block: attention, MLP and its two norms (weight and bias)."""
        d, kv = self.d_model, self.kv_heads * self.head_dim
        attention = 2 * d * d + 2 * d * kv  # q and out projections; k and v
        mlp = (3 if self.gated_mlp else 2) * d * self.ffn
        bias = (d + 2 * kv + d + self.ffn + d) if self.biases else 0
        return attention + mlp + bias + 2 * self.norm_params()

    def norm_params(self) -> int:
        """One norm: LayerNorm's weight and bias, or RMSNorm's weight alone (no biases)."""
        return 2 * self.d_model if self.biases else self.d_model

    def params(self) -> int:
        """All distinct parameters (a tied head counted once): the built module's count when
        known, else the formula (``formula_params``)."""
        return self.formula_params() if self.counted_params is None else self.counted_params

    def formula_params(self) -> int:
        """Parameters the shape implies (a tied head counted once), as ``model_to_params`` counts."""
        embeddings = (self.vocab + self.learned_positions) * self.d_model
        head = 0 if self.tied_head else self.vocab * self.d_model
        return embeddings + self.n_layer * self.layer_params() + self.norm_params() + head

    def largest_layer_params(self) -> int:
        """Parameters of the largest single module (what ZeRO-3 gathers at once): the
        embedding, the MLP's widest matrix or the fused qkv projection."""
        d = self.d_model
        mlp_matrix = d * self.ffn + (self.ffn if self.biases else 0)
        qkv = d * (d + 2 * self.kv_heads * self.head_dim) + (3 * d if self.biases else 0)
        return max(self.vocab * d, self.learned_positions * d, mlp_matrix, qkv)


def from_model_config(n_layer: int, n_head: int, d_model: int, seq_len: int) -> TransformerShape:
    """The built-in byte-level model (``engine/trainer/workloads/model.py``): learned positions, a
    4x GELU MLP with biases, fused qkv, a head tied to the token embedding."""
    return TransformerShape(
        n_layer=n_layer,
        d_model=d_model,
        n_head=n_head,
        seq_len=seq_len,
        vocab=BYTE_VOCAB,
        ffn=4 * d_model,
        kv_heads=n_head,
        learned_positions=seq_len,
    )


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _positive(config: Mapping[str, Any], where: str, *keys: str) -> int:
    value = _first(config, *keys)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ShapeError(f"{where}: {' or '.join(keys)} must be a positive integer (got {value!r})")
    return value


def from_hf_config(config: Mapping[str, Any], where: str, seq_len: int | None = None) -> TransformerShape:
    """A Hugging Face ``config.json`` (GPT-2, GPT-NeoX, LLaMA/Mistral/Qwen-style keys).

    ``seq_len`` overrides the config's context length (``max_position_embeddings`` or
    ``n_positions``); ``where`` names the file in errors."""
    d = _positive(config, where, "hidden_size", "n_embd", "d_model")
    n_head = _positive(config, where, "num_attention_heads", "n_head")
    if d % n_head:
        raise ShapeError(f"{where}: hidden size {d} is not a multiple of {n_head} heads")
    n_layer = _positive(config, where, "num_hidden_layers", "n_layer")
    vocab = _positive(config, where, "vocab_size")
    context = seq_len or _positive(config, where, "max_position_embeddings", "n_positions", "n_ctx")
    model_type = str(config.get("model_type", ""))
    gpt2 = model_type == "gpt2" or "n_embd" in config
    act = str(_first(config, "hidden_act", "activation_function") or "gelu").lower()
    ffn = _first(config, "intermediate_size", "n_inner") or 4 * d
    return TransformerShape(
        n_layer=n_layer,
        d_model=d,
        n_head=n_head,
        seq_len=context,
        vocab=vocab,
        ffn=int(ffn),
        kv_heads=int(_first(config, "num_key_value_heads") or n_head),
        gated_mlp=act in GATED_ACTIVATIONS,
        biases=gpt2 or bool(config.get("attention_bias") or config.get("use_bias")),
        learned_positions=int(_first(config, "n_positions", "max_position_embeddings") or 0) if gpt2 else 0,
        tied_head=bool(config.get("tie_word_embeddings", True)),
        source=where,
    )
