"""The user's own model: a Hugging Face ``transformers`` causal LM from a local directory,
trained on a local text or JSONL file (``[hf]`` in the run config).

- The directory holds ``config.json``, the tokenizer's files and, optionally, weights
  (``model.safetensors``, ``pytorch_model.bin`` or a sharded index): with weights the model
  starts from them, without them from a random initialisation seeded by the run's seed.
  ``local_files_only`` everywhere: nothing is downloaded; a missing file is a
  ``WorkloadError`` that names it.
- The dataset is tokenized once by that tokenizer (``engine.trainer.workloads.token_cache``), then
  packed: one stream of token ids, an end-of-text token after each document, from which each
  (step, micro) draws windows of ``model.seq_len + 1`` tokens at offsets that are a pure
  function of (seed, step, micro). A resumed run gets exactly the batches an uninterrupted
  one would have had (the same sampler as the built-in byte corpus).
- With ``hf.packing = false`` each sample is one document instead, padded to the
  micro-batch's longest (``engine.trainer.workloads.document_corpus``): lengths vary by step.
- The loss is the mean next-token cross-entropy in nats per token, computed here from the
  model's logits (fp32), so the batch is the same ``(x, y)`` pair as the built-in workload's;
  labels of -100 (padding) are left out of the mean.
- ``train.activation_checkpointing`` turns on the model's own switch,
  ``gradient_checkpointing_enable`` (non-reentrant, as the built-in model's); a model class
  without one is a ``WorkloadError`` that names the key.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine.config.run_config import RunConfig
from engine.memory.transformer_shape import ShapeError, TransformerShape, from_hf_config
from engine.trainer.workloads.corpus import ByteCorpus
from engine.trainer.workloads.document_corpus import IGNORE_INDEX, DocumentCorpus
from engine.trainer.workloads.token_cache import load_tokens
from engine.trainer.workloads.workload import Workload, WorkloadError

log = logging.getLogger(__name__)

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
HELDOUT_FRACTION = 0.02
"""The last 2% of the packed tokens are held out for an eval loss."""


class CausalLmLoss(nn.Module):
    """``forward(x, y)`` -> mean cross-entropy of ``lm``'s logits for x against y (int64,
    shape (batch, seq_len)), in nats per token."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.lm(input_ids=x, use_cache=False).logits  # (batch, seq_len, vocab)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


def hf_workload(config: RunConfig, cache_dir: Path) -> Workload:
    """The causal LM of ``config.hf.model_dir`` on ``config.hf.data``."""
    hf = config.hf
    if hf.model_dir is None or hf.data is None:
        raise WorkloadError("hf.model_dir and hf.data are both needed")
    transformers = _transformers()
    model_dir = _checked_dir(Path(hf.model_dir))
    tokenizer = _tokenizer(transformers, model_dir)
    lm = _model(transformers, model_dir, config.seed)
    lm.train()  # from_pretrained leaves it in eval mode: no dropout, no checkpointing
    if config.train.activation_checkpointing:
        _enable_checkpointing(lm, model_dir)
    limit = getattr(lm.config, "max_position_embeddings", None) or getattr(lm.config, "n_positions", None)
    if limit is not None and config.model.seq_len > int(limit):
        raise WorkloadError(
            f"model.seq_len {config.model.seq_len} is longer than {model_dir}/config.json allows ({limit})"
        )
    tokens = load_tokens(Path(hf.data), tokenizer, hf.text_key, cache_dir)
    log.info("hf model %s: %d parameters; %d tokens of %s", model_dir, _count(lm), len(tokens), hf.data)
    if not hf.packing:
        return _documents(
            config, CausalLmLoss(lm), tokenizer, tokens, _shape(lm, model_dir, config.model.seq_len)
        )
    split = int(len(tokens) * (1.0 - HELDOUT_FRACTION))
    if split <= config.model.seq_len + 1 or len(tokens) - split <= config.model.seq_len + 1:
        raise WorkloadError(
            f"hf.data {hf.data}: {len(tokens)} tokens are too few for sequences of {config.model.seq_len}"
        )
    corpus = ByteCorpus(
        train=tokens[:split], heldout=tokens[split:], seq_len=config.model.seq_len, seed=config.seed
    )
    return Workload(
        model=CausalLmLoss(lm),
        batch=corpus.batch,
        tokens_per_sample=config.model.seq_len,
        eval_batch=corpus.heldout_batch,
        shape=_shape(lm, model_dir, config.model.seq_len),
    )


def _shape(lm: Any, model_dir: Path, seq_len: int) -> TransformerShape | None:
    """The built model's own config (``lm.config``, as loaded), at the run's sequence length;
    None (parameters alone) for a config whose keys ``from_hf_config`` does not know."""
    try:
        return from_hf_config(lm.config.to_dict(), str(model_dir / "config.json"), seq_len)
    except ShapeError as err:
        log.warning(
            "hf model %s: shape not understood (%s): MFU from 6N, activations learned", model_dir, err
        )
        return None


def _documents(
    config: RunConfig, model: nn.Module, tokenizer: Any, tokens: torch.Tensor, shape: TransformerShape | None
) -> Workload:
    """``hf.packing = false``: one document per sample, the micro-batch padded to its longest."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise WorkloadError("hf.packing = false: the tokenizer has no end-of-text token to find documents by")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    seq_len = config.model.seq_len
    corpus = DocumentCorpus.of(tokens, eos, seq_len, config.seed, pad, HELDOUT_FRACTION)
    return Workload(
        model=model,
        batch=corpus.batch,
        tokens_per_sample=seq_len,
        eval_batch=corpus.heldout_batch,
        lengths=corpus.lengths,
        pad=(pad, IGNORE_INDEX),
        shape=shape,  # planned at the longest sample, model.seq_len
    )


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise WorkloadError("hf.model_dir needs the transformers package: pip install 'memtui[hf]'") from None
    transformers.logging.set_verbosity_error()  # its warnings about unused weights etc. once per rank
    return transformers


def _checked_dir(model_dir: Path) -> Path:
    if not model_dir.is_dir():
        raise WorkloadError(f"hf.model_dir {model_dir}: no such directory")
    if not (model_dir / "config.json").is_file():
        raise WorkloadError(f"hf.model_dir {model_dir}: no config.json (the model's shape) in it")
    return model_dir


def _tokenizer(transformers: Any, model_dir: Path) -> Any:
    try:
        return transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError, ImportError, AttributeError) as err:
        # ImportError: a slow tokenizer's library; AttributeError: transformers 4.57 converting
        # a directory with no vocabulary file at all (it reads vocab_file, which is None)
        raise WorkloadError(
            f"hf.model_dir {model_dir}: no usable tokenizer (tokenizer.json or the tokenizer's "
            f"vocabulary files): {err}"
        ) from None


def _model(transformers: Any, model_dir: Path, seed: int) -> nn.Module:
    """From the weights when the directory has them, else a seeded random initialisation."""
    auto = transformers.AutoModelForCausalLM
    try:
        if any((model_dir / name).is_file() for name in WEIGHT_FILES):
            return auto.from_pretrained(model_dir, local_files_only=True, torch_dtype=torch.float32)
        config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True)
        torch.manual_seed(seed)
        log.info("hf model %s: no weights in the directory, random initialisation (seed %d)", model_dir, seed)
        return auto.from_config(config, torch_dtype=torch.float32)
    except (OSError, ValueError, KeyError) as err:
        raise WorkloadError(f"hf.model_dir {model_dir}: cannot build the causal LM: {err}") from None


def _enable_checkpointing(lm: nn.Module, model_dir: Path) -> None:
    """The model's own per-layer recomputation (``use_reentrant=False``: works under
    ZeRO-3's parameter hooks and replays dropout's RNG)."""
    name = type(lm).__name__
    if not getattr(lm, "supports_gradient_checkpointing", False):
        raise WorkloadError(
            f"train.activation_checkpointing: {name} (hf.model_dir {model_dir}) does not support "
            "gradient checkpointing; turn the key off for this model"
        )
    try:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # type: ignore[operator]
    except (ValueError, NotImplementedError) as err:
        raise WorkloadError(f"train.activation_checkpointing: {name} refused it: {err}") from None
    log.info("hf model %s: activation checkpointing on (the model's gradient checkpointing)", name)


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
