"""``train.activation_checkpointing`` in the models, without DeepSpeed.

The built-in model recomputes each block in backward (its forward runs twice per step) and,
with dropout, trains to the same losses and gradients as without; an HF model turns on its
own gradient checkpointing, and a model class without one is refused naming the key.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hf_fixture import make_model_dir, sample_texts, write_jsonl

from engine.config.config_file import build_run_config
from engine.config.run_config import ModelConfig
from engine.trainer.workloads.hf_workload import hf_workload
from engine.trainer.workloads.model import VOCAB_SIZE, Block, ByteTransformer
from engine.trainer.workloads.workload import WorkloadError, builtin_workload

SHAPE = ModelConfig(n_layer=2, n_head=2, d_model=32, seq_len=32, dropout=0.3)


class CountedBlock(Block):
    """A block that counts its forwards (a forward hook does not see the recompute)."""

    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CountedBlock.calls += 1
        return super().forward(x)


def train(checkpointing: bool, steps: int = 4) -> tuple[list[float], list[torch.Tensor], int]:
    """(losses, the last step's gradients, block forwards) of a few Adam steps from seed 0."""
    torch.manual_seed(0)
    model = ByteTransformer(SHAPE, checkpointing=checkpointing)
    for block in model.blocks:
        block.__class__ = CountedBlock
    CountedBlock.calls = 0
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randint(0, VOCAB_SIZE, (2, 4, SHAPE.seq_len), generator=batches)
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return losses, grads, CountedBlock.calls


def test_the_builtin_model_recomputes_each_block_and_keeps_dropouts_masks() -> None:
    plain_losses, plain_grads, plain_forwards = train(checkpointing=False)
    losses, grads, forwards = train(checkpointing=True)
    assert forwards == 2 * plain_forwards  # every block ran again in backward
    assert losses == pytest.approx(plain_losses, rel=1e-5)
    for got, want in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_the_builtin_workload_takes_the_key_from_the_run_config() -> None:
    raw = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32}}
    on = builtin_workload(build_run_config(raw | {"train": {"activation_checkpointing": True}}))
    off = builtin_workload(build_run_config(raw))
    assert isinstance(on.model, ByteTransformer) and on.model.checkpointing
    assert isinstance(off.model, ByteTransformer) and not off.model.checkpointing


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    pytest.importorskip("transformers")
    path = Path(tempfile.mkdtemp(prefix="mtck", dir="/tmp"))
    make_model_dir(path / "gpt2", weights=False)
    make_model_dir(path / "gpt2-weights", weights=True)
    write_jsonl(path / "data.jsonl", sample_texts())
    yield path
    shutil.rmtree(path, ignore_errors=True)


def hf_run(scratch: Path, model: str, checkpointing: bool) -> dict:
    return {
        "model": {"seq_len": 64},
        "train": {"activation_checkpointing": checkpointing},
        "hf": {"model_dir": str(scratch / model), "data": str(scratch / "data.jsonl")},
    }


@pytest.mark.parametrize("model", ["gpt2", "gpt2-weights"])
def test_an_hf_model_turns_on_its_own_gradient_checkpointing(scratch: Path, model: str) -> None:
    on = hf_workload(build_run_config(hf_run(scratch, model, True)), scratch / "cache")
    off = hf_workload(build_run_config(hf_run(scratch, model, False)), scratch / "cache")
    assert on.model.lm.is_gradient_checkpointing and not off.model.lm.is_gradient_checkpointing
    # HF checkpoints (and drops out) only in training mode, which from_pretrained leaves
    assert on.model.lm.training and off.model.lm.training
    off.model.load_state_dict(on.model.state_dict())  # the same weights: compare the gradients
    x, y = on.batch(0, 0, 2)
    for workload in (on, off):
        torch.manual_seed(3)
        workload.model(x, y).backward()
    for a, b in zip(on.model.parameters(), off.model.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)


def test_an_hf_model_without_checkpointing_is_refused_naming_the_key(scratch: Path) -> None:
    transformers = pytest.importorskip("transformers")
    gpt = scratch / "openai-gpt"
    shutil.copytree(scratch / "gpt2", gpt)
    vocab = json.loads((gpt / "config.json").read_text())["vocab_size"]
    config = transformers.OpenAIGPTConfig(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=1, n_head=2)
    config.save_pretrained(gpt)
    hf_workload(build_run_config(hf_run(scratch, "openai-gpt", False)), scratch / "cache")  # builds without
    with pytest.raises(WorkloadError, match=r"train\.activation_checkpointing: OpenAIGPTLMHeadModel"):
        hf_workload(build_run_config(hf_run(scratch, "openai-gpt", True)), scratch / "cache")
