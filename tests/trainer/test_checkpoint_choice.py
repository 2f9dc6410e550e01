"""Rank 0's resume choice (``checkpoint._choose``) and the events it sends: every tag it sets
aside says where it went. Torch is imported, no DeepSpeed engine is built."""

from __future__ import annotations

import os
from pathlib import Path

from engine.checkpoints.store import CheckpointStore
from engine.trainer.checkpoints.checkpoint import _choose
from engine.trainer.link import NullLink
from engine.wire.protocol import TrainerEvent

FIELDS = {"samples": 0, "config_hash": "c" * 64, "micro_batch": 8, "grad_accum": 1}


def save(store: CheckpointStore, step: int) -> None:
    def write(staging: str) -> None:
        (store.directory / staging).mkdir()
        (store.directory / staging / "model.pt").write_bytes(os.urandom(4096))

    assert store.save(step, write, FIELDS, estimate_bytes=1000).status == "saved"


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_rejected_tag_moved_to_quarantine_names_where(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    save(store, 10)
    save(store, 20)
    flip_a_byte(tmp_path / "global_step20" / "model.pt")
    link = NullLink(record=True)
    choice = _choose(store, allow_fresh=False, link=link)
    assert choice.action == "resume" and choice.chosen.step == 10
    sent = [m for m in link.sent or [] if isinstance(m, TrainerEvent) and m.type == "checkpoint_rejected"]
    (rejected,) = sent
    moved = rejected.data["quarantined"]
    assert moved is not None and (tmp_path / "quarantine" / moved).is_dir()
    assert f"quarantine/{moved}" in rejected.message and not (tmp_path / "global_step20").exists()
