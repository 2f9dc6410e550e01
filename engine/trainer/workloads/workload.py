"""The workload contract: what the trainer trains.

A workload is a model plus a deterministic source of batches::

    from engine.config.run_config import RunConfig
    from engine.trainer.workloads.workload import Workload

    def build(config: RunConfig) -> Workload:
        model = MyModel(...)               # torch.nn.Module; forward(*batch) -> scalar loss
        def batch(step: int, micro: int, micro_batch: int) -> tuple[torch.Tensor, ...]:
            ...                            # the same (step, micro) always gives the same batch
        return Workload(model=model, batch=batch, tokens_per_sample=seq_len)

and in the run config ``workload = "my_package.my_module:build"``.

Rules:

- ``model(*batch(step, micro, micro_batch))`` returns a scalar loss tensor; DeepSpeed
  calls exactly that as ``engine(*batch)``, then ``engine.backward(loss)``.
- ``batch(step, micro, micro_batch)`` is a pure function of its arguments (and the run's
  seed): the trainer asks for micro-batches ``0 .. grad_accum-1`` of optimizer step
  ``step`` (0-based: the step about to run). A resumed run asks again for the steps after
  the checkpoint and must get the data an uninterrupted run would have had. The batch's
  leading dimension is ``micro_batch``, which the memory controller may change between
  steps. Tensors may live on the CPU; the trainer moves them to the device.
- With several ranks (``train.ranks``), micro-batch indices are global over the ranks:
  rank r asks for ``micro * world + r``, so no sample is drawn twice in a step.
- ``tokens_per_sample`` counts the tokens in one sample, for the tokens and tokens/s
  figures (use 1 if tokens mean nothing for your data).
- ``eval_batch`` (optional) gives held-out batches by index for an eval loss: every
  ``eval.every_steps`` steps the trainer evaluates indices ``0 .. eval.batches-1`` at the
  configured micro-batch, without gradients (``engine.trainer.telemetry.evaluation``).
- ``shape`` (optional) declares a transformer's shape (``engine.memory.transformer_shape``:
  layers, width, heads, sequence, vocabulary) for the FLOPs per token, the memory prior
  and the plan; without it the model is known by its parameter count alone (MFU from 6N,
  activations learned from measured peaks).
- Sequence lengths may vary by step (documents of their real length, a length that grows
  over the run). Then give ``lengths(step, micro, micro_batch)``: the tokens each sample of
  that batch trains (int64, shape (micro_batch,)), a pure function like ``batch`` and cheap
  (no batch built): the memory controller reads the coming step's longest before the step
  (and shrinks the micro-batch when it would not fit), and tokens and tokens/s count these.
  A batch is padded to its longest sample; ``pad`` gives each tensor's padding value (the
  inputs' pad token, -100 for labels the loss ignores) for when the trainer joins two
  batches of different lengths into one micro-batch.
- ``lr_scheduler`` (optional) brings your own LR schedule: called once with the optimizer
  (``deepspeed.initialize(lr_scheduler=...)``), it returns a scheduler that DeepSpeed
  steps after every applied optimizer step. It replaces memtui's warm-up + cosine schedule
  (and a deepspeed_config ``scheduler``). An lr directive multiplies the lr it sets,
  without compounding, and telemetry reports the lr the optimizer used.
- ``config.train.activation_checkpointing``: when it is true, your model should recompute
  its activations in backward instead of keeping them, e.g. each block through
  ``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`` (non-reentrant: it
  works under ZeRO-3 and keeps dropout's masks), or a Hugging Face model's
  ``gradient_checkpointing_enable()``. memtui cannot do it for you (it does not know where
  your blocks are) but plans and predicts memory as if you did; the built-in and ``[hf]``
  models honour it.
- The function is imported in the trainer process (``module:function``, with
  ``workload_dir`` first on ``sys.path``: by default the config file's directory, or
  where ``memtui run`` was started) and called once with the ``RunConfig``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine.config.run_config import RunConfig
from engine.memory.transformer_shape import TransformerShape, from_model_config

BatchFn = Callable[[int, int, int], tuple[torch.Tensor, ...]]
"""(step, micro, micro_batch) -> the tensors passed to ``model(*batch)``."""
LengthsFn = Callable[[int, int, int], torch.Tensor]
"""(step, micro, micro_batch) -> int64 (micro_batch,): tokens each sample of that batch trains."""


@dataclass
class Workload:
    model: torch.nn.Module
    """forward(*batch) returns a scalar loss."""
    batch: BatchFn
    """Deterministic in (step, micro); leading dimension micro_batch."""
    tokens_per_sample: int
    """Tokens in one sample (sequence length for a language model)."""
    eval_batch: Callable[[int, int], tuple[torch.Tensor, ...]] | None = None
    """Optional (index, micro_batch) -> held-out batch."""
    lr_scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    """Optional optimizer -> LR scheduler (stepped once per applied optimizer step)."""
    shape: TransformerShape | None = None
    """Optional: the model's shape (the parameter count is taken from the module)."""
    lengths: LengthsFn | None = None
    """Optional (step, micro, micro_batch) -> tokens each sample trains (varying lengths)."""
    pad: tuple[int, ...] | None = None
    """Per tensor of a batch, the value its shorter samples are padded with (varying lengths)."""


class WorkloadError(RuntimeError):
    """The configured workload could not be imported or broke the contract."""


def builtin_workload(config: RunConfig) -> Workload:
    """The byte-level transformer on the standard library's source."""
    from engine.trainer.workloads.corpus import ByteCorpus
    from engine.trainer.workloads.model import ByteTransformer
    from engine.trainer.workloads.sequence_growth import SequenceGrowth

    growth = SequenceGrowth.of(config.model)
    corpus = ByteCorpus.load(seq_len=config.model.seq_len, seed=config.seed, growth=growth)
    m = config.model
    return Workload(
        model=ByteTransformer(m, checkpointing=config.train.activation_checkpointing),
        batch=corpus.batch,
        tokens_per_sample=m.seq_len,
        eval_batch=corpus.heldout_batch,
        shape=from_model_config(m.n_layer, m.n_head, m.d_model, m.seq_len),
        lengths=corpus.lengths if growth is not None else None,
    )


def load_workload(config: RunConfig) -> Workload:
    """The built-in workload, or the user's ``module:function`` called with ``config``
    (the Hugging Face one, ``[hf]``, is ``engine.trainer.workloads.hf_workload``)."""
    if config.workload is None:
        return builtin_workload(config)
    factory = _import_factory(config.workload, config.workload_dir)
    try:
        workload = factory(config)
    except Exception as err:
        raise WorkloadError(f"workload {config.workload}: raised {type(err).__name__}: {err}") from err
    return _checked(workload, config.workload)


def _import_factory(spec: str, workdir: str | None) -> Callable[[RunConfig], object]:
    module_name, _, attr = spec.partition(":")
    if workdir and workdir not in sys.path:
        sys.path.insert(0, workdir)  # the trainer's cwd is the run dir, not the user's project
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise WorkloadError(f"workload {spec}: cannot import {module_name!r}: {err}") from err
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkloadError(f"workload {spec}: {module_name} has no callable {attr!r}")
    return factory


def _checked(workload: object, spec: str) -> Workload:
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload {spec}: returned {type(workload).__name__}, "
            "expected engine.trainer.workloads.workload.Workload"
        )
    if not isinstance(workload.model, torch.nn.Module):
        raise WorkloadError(
            f"workload {spec}: model is {type(workload.model).__name__}, not a torch.nn.Module"
        )
    if not callable(workload.batch):
        raise WorkloadError(f"workload {spec}: batch is not callable")
    if not isinstance(workload.tokens_per_sample, int) or workload.tokens_per_sample < 1:
        raise WorkloadError(f"workload {spec}: tokens_per_sample must be a positive int")
    if workload.shape is not None and not isinstance(workload.shape, TransformerShape):
        raise WorkloadError(
            f"workload {spec}: shape is {type(workload.shape).__name__}, "
            "expected engine.memory.transformer_shape.TransformerShape (or None)"
        )
    return workload
