"""The memory model a run starts from (``engine.memory.model.MemoryModel``): the model
states of the model actually built, at the run's precision, ZeRO stage and offload (its
``deepspeed_config``, ``engine.memory.offload_setting``), and the activations per sample
its shape implies (activation checkpointing counted); measured peaks calibrate both.

A workload that declares no shape gets no activation prior: it is learned from the first
two steps at different micro-batches (``MemoryModel.observe``).
"""

from __future__ import annotations

from engine.config.run_config import RunConfig
from engine.memory.model import MemoryModel
from engine.memory.model_description import ModelDescription
from engine.memory.offload_setting import offload_setting


def build_memory_model(config: RunConfig, description: ModelDescription, world_size: int) -> MemoryModel:
    """Model states and the activation prior of ``description`` under ``config``."""
    train = config.train
    offload = offload_setting(config).offload
    states = description.model_states(train.precision, train.zero_stage, world_size, offload)
    per_sample = description.activation_bytes(train.precision, train.activation_checkpointing)
    seq_len = description.shape.seq_len if description.shape is not None else config.model.seq_len
    return MemoryModel(model_states=states.total, per_sample=per_sample, seq_len=seq_len)
