"""One description of the model a run trains: what MFU, the memory prior, the plan and the
console's breakdown read, so that none of them guesses the shape from the config.

Torch-free and pure. The trainer builds it from the module it built (the parameter count
wins over any formula) and the shape its workload gives (``Workload.shape``): the built-in
model's config, a Hugging Face model's ``config.json`` (through ``from_hf_config``) or the
shape a user's ``module:function`` workload declares. A workload that declares none is
described by its parameters alone: MFU from 6N, the activations learned from measured peaks.

It travels with ``trainer_started`` as a plain mapping (``as_wire``; the contract imports no
engine package), read back by ``from_wire``, which names the field a bad one lacks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.memory.flops import dense_flops_per_token, flops_per_token
from engine.memory.model import ModelStates, Offload, model_state_bytes, transformer_activation_bytes
from engine.memory.transformer_shape import ShapeError, TransformerShape

SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(TransformerShape))


@dataclass(frozen=True)
class ModelDescription:
    """The model actually trained (counts in elements, not bytes)."""

    params: int
    """Distinct parameters of the built module (a tied head counted once)."""
    largest_layer_params: int
    """Parameters of its largest single module (what ZeRO-3 gathers at once)."""
    source: str
    """``built-in``, a Hugging Face ``config.json``'s path, or ``workload MODULE:FUNCTION``."""
    shape: TransformerShape | None = None
    """Layers, width, heads, sequence, vocabulary; None: the workload declared none."""

    @property
    def words(self) -> str:
        """One line for a person: what was built, and what is unknown about it."""
        head = f"{self.source}: {self.params / 1e6:,.1f} M parameters"
        s = self.shape
        if s is None:
            return f"{head}; shape not declared (MFU from 6N, activations learned from measured peaks)"
        return (
            f"{head}, {s.n_layer} layers x {s.d_model}, {s.n_head} heads, vocabulary {s.vocab:,}, "
            f"sequence {s.seq_len:,}"
        )

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6N plus the attention term, or 6N without a shape."""
        if self.shape is None:
            return dense_flops_per_token(self.params)
        return flops_per_token(self.shape)

    def activation_bytes(self, precision: str, checkpointing: bool) -> float:
        """Bytes one sample keeps for backward (the prior); 0 without a shape (learned)."""
        s = self.shape
        if s is None:
            return 0.0
        return transformer_activation_bytes(
            s.seq_len,
            s.d_model,
            s.n_layer,
            s.n_head,
            s.vocab,
            precision,
            checkpointing,
            ffn=s.ffn,
            gated=s.gated_mlp,
            kv_dim=s.kv_heads * s.head_dim,
        )

    def model_states(self, precision: str, zero_stage: int, world_size: int, offload: Offload) -> ModelStates:
        """Per-rank bytes of parameters, gradients and optimizer states."""
        return model_state_bytes(
            self.params, precision, zero_stage, world_size, self.largest_layer_params, offload
        )

    def as_wire(self) -> dict[str, Any]:
        """A JSON-ready mapping (``from_wire`` reads it back)."""
        return dataclasses.asdict(self)


def describe(
    params: int, largest_layer_params: int, source: str, shape: TransformerShape | None
) -> ModelDescription:
    """The description of a built module: its counts, and its shape carrying the count (so
    every formula that reads ``shape.params()`` reads the module's). The largest layer is
    the shape's when there is one (the plan's figure), else the module's."""
    if params < 1:
        raise ShapeError(f"{source}: params must be positive (got {params})")
    if shape is None:
        return ModelDescription(params, largest_layer_params, source)
    counted = dataclasses.replace(shape, counted_params=params)
    return ModelDescription(params, counted.largest_layer_params(), source, counted)


def from_wire(data: Mapping[str, Any]) -> ModelDescription:
    """A description sent with ``trainer_started``; ShapeError names a missing or bad field."""
    fields: dict[str, int] = {}
    for name in ("params", "largest_layer_params"):
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ShapeError(f"model description: {name} must be a non-negative integer (got {value!r})")
        fields[name] = value
    source = data.get("source")
    if not isinstance(source, str):
        raise ShapeError(f"model description: source must be a string (got {source!r})")
    raw = data.get("shape")
    if raw is None:
        return ModelDescription(fields["params"], fields["largest_layer_params"], source)
    if not isinstance(raw, Mapping):
        raise ShapeError(f"model description: shape must be a mapping (got {type(raw).__name__})")
    missing = [name for name in SHAPE_FIELDS if name not in raw and name != "counted_params"]
    if missing:
        raise ShapeError(f"model description: shape.{missing[0]} is missing")
    try:
        shape = TransformerShape(**{name: raw[name] for name in SHAPE_FIELDS if name in raw})
    except TypeError as err:
        raise ShapeError(f"model description: shape: {err}") from None
    return ModelDescription(fields["params"], fields["largest_layer_params"], source, shape)
