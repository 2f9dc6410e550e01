"""Each rank's RNG states come back to that rank on resume: a checkpoint keeps them all
(``Manifest.rank_rng``, gathered at the save); a rank the checkpoint had not, or a checkpoint
written before ranks kept theirs, takes rank 0's. No process group: the states are set and
read in this process."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from engine.checkpoints.manifest import Manifest
from engine.trainer.checkpoints.checkpoint import capture_rng, restore_after_load


def manifest(rank_rng: list[dict]) -> Manifest:  # type: ignore[type-arg]
    return Manifest(
        tag="global_step10",
        step=10,
        samples=80,
        created_at=0.0,
        config_hash="x",
        rng=rank_rng[0] if rank_rng else state_after(0),
        rank_rng=rank_rng,
        micro_batch=8,
        grad_accum=1,
        world_size=len(rank_rng) or 1,
        files={},
    )


def state_after(draws: int) -> dict:  # type: ignore[type-arg]
    """The RNG states after ``draws`` draws from seed 0: a rank that drew differently."""
    torch.manual_seed(0)
    torch.rand(draws)
    return capture_rng()


ENGINE = SimpleNamespace(train_micro_batch_size_per_gpu=lambda: 8, gradient_accumulation_steps=lambda: 1)


def test_each_rank_takes_its_own_rng_back() -> None:
    ranks = [state_after(0), state_after(5)]
    restore_after_load(ENGINE, manifest(ranks), rank=1)
    expected = torch.rand(3)
    restore_after_load(ENGINE, manifest(ranks), rank=1)
    assert torch.equal(torch.rand(3), expected)
    restore_after_load(ENGINE, manifest(ranks), rank=0)
    assert not torch.equal(torch.rand(3), expected)  # rank 0's stream is another one


def test_a_rank_the_checkpoint_had_not_takes_rank_0_s() -> None:
    ranks = [state_after(7)]
    restore_after_load(ENGINE, manifest(ranks), rank=3)  # resumed at more ranks
    from_rank_3 = torch.rand(3)
    restore_after_load(ENGINE, manifest(ranks), rank=0)
    assert torch.equal(torch.rand(3), from_rank_3)
    older = manifest([]).model_copy(update={"rng": state_after(7)})  # no rank_rng at all
    restore_after_load(ENGINE, older, rank=1)
    assert torch.equal(torch.rand(3), from_rank_3)
