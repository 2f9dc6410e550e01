"""Sequence lengths that vary by step, without DeepSpeed: the built-in growth schedule and
its keys, one document per sample (``hf.packing = false``) padded to the micro-batch's
longest with the padding out of the loss, blocks of different lengths joined by the
``SampleWindow``, and the tokens of a step read before it (``StepLengths``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hf_fixture import make_model_dir, sample_texts, write_jsonl

from engine.config.config_file import ConfigError, build_run_config
from engine.config.run_config import ModelConfig
from engine.trainer.workloads.document_corpus import IGNORE_INDEX, DocumentCorpus
from engine.trainer.workloads.sample_window import SampleWindow
from engine.trainer.workloads.sequence_growth import SequenceGrowth
from engine.trainer.workloads.step_lengths import StepLengths
from engine.trainer.workloads.workload import builtin_workload

EOS = 0


def documents(count: int = 60, seed: int = 1) -> torch.Tensor:
    """A token stream of ``count`` documents of 1..40 tokens (ids 1..), each followed by EOS."""
    gen = torch.Generator().manual_seed(seed)
    ids: list[int] = []
    for _ in range(count):
        size = int(torch.randint(1, 41, (1,), generator=gen))
        ids += list(range(1, size + 1)) + [EOS]
    return torch.tensor(ids, dtype=torch.int32)


@pytest.fixture
def corpus() -> DocumentCorpus:
    return DocumentCorpus.of(documents(), EOS, seq_len=16, seed=3, pad_id=EOS, heldout_fraction=0.05)


def test_the_growth_keys_double_up_to_seq_len_and_bad_ones_name_the_field() -> None:
    growth = SequenceGrowth.of(ModelConfig(seq_len=256, seq_len_start=64, seq_len_doubling_steps=5))
    assert growth is not None
    assert [growth.at(s) for s in (0, 4, 5, 9, 10, 15, 10**9)] == [64, 64, 128, 128, 256, 256, 256]
    assert SequenceGrowth.of(ModelConfig(seq_len=256)) is None
    with pytest.raises(ConfigError, match="seq_len_start"):
        build_run_config({"model": {"seq_len": 128, "seq_len_start": 256}})
    with pytest.raises(ConfigError, match="seq_len_start"):
        build_run_config({"model": {"seq_len_start": 64}, "workload": "pkg.mod:build"})
    assert build_run_config({"hf": {"model_dir": "m", "data": "d", "packing": False}}).hf.packing is False


def test_the_builtin_workload_trains_the_growing_length() -> None:
    config = build_run_config({"model": {"seq_len": 128, "seq_len_start": 32, "seq_len_doubling_steps": 4}})
    workload = builtin_workload(config)
    assert workload.lengths is not None
    for step, length in ((0, 32), (3, 32), (4, 64), (8, 128), (100, 128)):
        x, y = workload.batch(step, 1, 4)
        assert x.shape == y.shape == (4, length)
        assert workload.lengths(step, 1, 4).tolist() == [length] * 4
    assert torch.equal(workload.batch(5, 2, 4)[0], workload.batch(5, 2, 4)[0])  # pure
    assert builtin_workload(build_run_config({})).lengths is None  # fixed length: nothing to read


def test_one_document_per_sample_padded_to_the_longest_and_left_out_of_the_loss(
    corpus: DocumentCorpus,
) -> None:
    x, y = corpus.batch(2, 1, 6)
    again = corpus.batch(2, 1, 6)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])  # pure in (seed, step, micro)
    lengths = corpus.lengths(2, 1, 6)
    assert x.shape == (6, int(lengths.max())) and int(lengths.max()) <= 16  # truncated to seq_len
    real = y != IGNORE_INDEX
    assert real.sum(dim=1).tolist() == lengths.tolist()  # the trained tokens, no more
    assert torch.equal(x[:, 1:][real[:, 1:]], y[:, :-1][real[:, 1:]])  # y is x shifted by one
    assert (x[~real] == EOS).all()  # padded with the pad id
    logits = torch.randn(*x.shape, 8)
    padded = F.cross_entropy(logits.flatten(0, 1), y.clamp(max=7).flatten())
    alone = F.cross_entropy(logits[real], y[real].clamp(max=7))
    assert torch.allclose(padded, alone)  # the padding changes nothing in the loss
    others = {tuple(corpus.lengths(step, 0, 6).tolist()) for step in range(8)}
    assert len(others) > 1  # the lengths vary by step
    held = corpus.heldout_batch(0, 4)[0]
    assert held.shape[0] == 4


def test_the_sample_window_joins_blocks_of_different_lengths_with_the_padding(corpus: DocumentCorpus) -> None:
    step = next(
        s for s in range(50) if corpus.batch(s, 0, 2)[0].shape[1] != corpus.batch(s, 1, 2)[0].shape[1]
    )
    x, y = SampleWindow(corpus.batch, 2, pad=(EOS, IGNORE_INDEX))(step, 0, 4)  # blocks 0 and 1 of 2
    assert x.shape[0] == 4 and x.shape[1] == max(corpus.batch(step, b, 2)[0].shape[1] for b in (0, 1))
    assert (y != IGNORE_INDEX).sum().item() == sum(int(corpus.lengths(step, b, 2).sum()) for b in (0, 1))
    with pytest.raises(ValueError, match="Workload.pad"):
        SampleWindow(corpus.batch, 2)(step, 0, 4)


def test_step_lengths_reads_every_rank_s_longest_and_tokens_before_the_step(corpus: DocumentCorpus) -> None:
    lengths = StepLengths(corpus.lengths, base_micro_batch=2, global_batch=8)  # 4 blocks a step
    blocks = [corpus.lengths(5, b, 2) for b in range(4)]
    assert lengths.longest(5) == max(int(b.max()) for b in blocks)
    assert lengths.tokens(5) == sum(int(b.sum()) for b in blocks)
    assert lengths.tokens_before(3) == sum(lengths.tokens(s) for s in range(3))


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    pytest.importorskip("transformers")
    path = Path(tempfile.mkdtemp(prefix="mtgs", dir="/tmp"))
    make_model_dir(path / "model", weights=False)
    write_jsonl(path / "data.jsonl", sample_texts())
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_hf_workload_with_packing_off_trains_documents_of_their_own_length(scratch: Path) -> None:
    from engine.trainer.workloads.hf_workload import hf_workload

    raw = {
        "model": {"seq_len": 64},
        "hf": {"model_dir": str(scratch / "model"), "data": str(scratch / "data.jsonl")},
    }
    config = build_run_config(raw | {"hf": raw["hf"] | {"packing": False}})
    workload = hf_workload(config, scratch / "cache")
    assert workload.lengths is not None and workload.pad is not None and workload.pad[1] == IGNORE_INDEX
    widths = {workload.batch(step, 0, 1)[0].shape[1] for step in range(20)}  # one document each
    assert len(widths) > 1 and max(widths) <= 64  # each micro-batch as long as its longest document
    x, y = workload.batch(3, 1, 4)
    assert (y != IGNORE_INDEX).sum(dim=1).tolist() == workload.lengths(3, 1, 4).tolist()
    assert torch.equal(x, hf_workload(config, scratch / "cache").batch(3, 1, 4)[0])  # pure
    loss = workload.model(x, y)
    assert loss.ndim == 0 and torch.isfinite(loss)
