"""The checkpoints' standing: every tag verified in full, a verdict kept only while none of
the tag's files changed (an in-place corruption is seen at the next reading)."""

from __future__ import annotations

from pathlib import Path

from checkpoint_samples import FIELDS, writer

from engine.checkpoints.standing import standing_of
from engine.checkpoints.store import CheckpointStore


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_tag_corrupted_after_it_verified_is_named_at_the_next_reading(directory: Path) -> None:
    store = CheckpointStore(directory, keep=3)
    for step in (10, 20, 30):
        store.save(step, writer(directory, step), dict(FIELDS, samples=step * 8), estimate_bytes=1000)
    first = standing_of(directory)
    assert (first.step, first.tag, first.on_disk, first.rejected) == (30, "global_step30", 3, ())
    flip(directory / "global_step30" / "mp_rank_00_model_states.pt")  # same size, new bytes
    flip(directory / "global_step10" / "mp_rank_00_model_states.pt")  # older: not a resume's concern
    after = standing_of(directory)
    assert [step for step, _ in after.verified] == [20] and after.step == 20
    (rejected,) = after.rejected
    assert rejected.startswith("global_step30: checksum mismatch in mp_rank_00_model_states.pt")
    assert after.status_fields() == {"checkpoint_step": 20, "checkpoint_rejected": [rejected]}
