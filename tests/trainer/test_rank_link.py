"""RankLink and the checkpoint's rank protocol with scripted collectives (no process group).

A ``ScriptedGroup`` plays one rank; what "the other ranks" contribute to an all-reduce or
a broadcast is scripted, so each rank's side of a collective is checked on its own.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from engine.checkpoints.catalog import committed_tags
from engine.checkpoints.store import CheckpointStore
from engine.config.config_file import build_run_config
from engine.events import FreshStart
from engine.trainer.checkpoints import checkpoint
from engine.trainer.link import NullLink
from engine.trainer.ranks.rank_link import RankLink
from engine.wire.protocol import ApplyDirective


class ScriptedGroup:
    """Rank ``rank`` of ``world``; others' all-reduce inputs and rank 0's broadcasts scripted."""

    def __init__(self, rank: int, world: int = 2, others: list[list[int]] | None = None, sent: Any = None):
        self.rank, self.world = rank, world
        self.others = deque(others or [])
        self.sent = deque(sent or [])
        self.calls: list[str] = []

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def max_ints(self, values: list[int]) -> list[int]:
        self.calls.append("max")
        other = self.others.popleft() if self.others else [0] * len(values)
        return [max(int(a), b) for a, b in zip(values, other, strict=True)]

    def broadcast(self, value: Any) -> Any:
        self.calls.append("broadcast")
        return value if self.leader else self.sent.popleft()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``: this rank's in its place, the others' the same (RNG states)."""
        self.calls.append("gather")
        return [value] * self.world


def directive(n: int) -> ApplyDirective:
    return ApplyDirective(directive_id=f"d{n}", decision_id=f"x{n}", values={"lr_multiplier": 0.5})


def test_rank0_shares_its_directives_and_any_ranks_stop() -> None:
    inner = NullLink(record=True)
    inner.directives.extend([directive(1), directive(2)])
    link = RankLink(inner, ScriptedGroup(0, others=[[1, 0, 0]]))  # rank 1 got SIGTERM
    link.sync()
    assert [d.directive_id for d in link.directives] == ["d1", "d2"] and not inner.directives
    assert link.stop_requested.is_set()
    link.event(FreshStart(), "x")
    assert len(inner.sent or []) == 1  # rank 0 speaks


def test_other_ranks_queue_rank0s_directives_and_stay_quiet() -> None:
    inner = NullLink(record=True)
    shared = ([directive(3).model_dump(mode="json")], [])  # (directives, chaos requests)
    group = ScriptedGroup(1, others=[[0, 1, 0]], sent=[shared])
    link = RankLink(inner, group)
    link.sync()
    assert list(link.directives) == [directive(3)] and not link.stop_requested.is_set()
    assert group.calls == ["max", "broadcast"]
    link.event(FreshStart(), "y")
    assert inner.sent == []  # only rank 0 reports


def test_a_pause_on_rank0_holds_every_rank_until_it_is_lifted() -> None:
    follower = RankLink(NullLink(), ScriptedGroup(1, others=[[0, 0, 1], [0, 0, 1], [0, 0, 0]]))
    follower.sync()
    assert follower.pause_requested.is_set()  # rank 0 asked: rank 1 holds too
    follower.sync()
    assert follower.pause_requested.is_set()
    follower.sync()
    assert not follower.pause_requested.is_set() and not follower.stop_requested.is_set()


def test_no_broadcast_when_no_directive_waits_anywhere() -> None:
    group = ScriptedGroup(0, others=[[0, 0, 0]])
    link = RankLink(NullLink(), group)
    link.sync()
    assert group.calls == ["max"] and not link.directives and not link.stop_requested.is_set()


class ShardEngine:
    """Writes one file per rank into the tag, like DeepSpeed's per-rank optimizer shards."""

    global_steps, global_samples = 10, 160
    module = type("M", (), {"parameters": lambda self: iter(())})()

    def __init__(self, rank: int, fail: bool = False) -> None:
        self.rank, self.fail = rank, fail

    def save_checkpoint(self, directory: str, tag: str, client_state: dict, save_latest: bool) -> None:
        if self.fail:
            raise OSError(28, "No space left on device")
        path = Path(directory) / tag
        path.mkdir(parents=True, exist_ok=True)
        (path / f"shard_{self.rank}.pt").write_bytes(b"x" * 64)

    def train_micro_batch_size_per_gpu(self) -> int:
        return 8

    def gradient_accumulation_steps(self) -> int:
        return 1


def test_rank0_seals_only_what_every_rank_wrote(tmp_path: Path) -> None:
    config = build_run_config({})
    store = CheckpointStore(tmp_path, keep=3)
    group = ScriptedGroup(0, others=[[0]])  # rank 1 wrote its shard
    saved = checkpoint.save(ShardEngine(0), store, config, {"world_size": 2}, None, group)
    assert saved.status == "saved" and committed_tags(tmp_path) == [(10, "global_step10")]
    # RNG states in, tag out, failures in, outcome out
    assert group.calls == ["gather", "broadcast", "max", "broadcast"]

    group = ScriptedGroup(0, others=[[1]])  # rank 1 could not write its shard
    ShardEngine.global_steps = 20
    try:
        failed = checkpoint.save(ShardEngine(0), store, config, {"world_size": 2}, None, group)
    finally:
        ShardEngine.global_steps = 10
    assert failed.status == "failed" and "another rank" in (failed.reason or "")
    assert committed_tags(tmp_path) == [(10, "global_step10")]  # the older one kept, no half tag


def test_a_follower_writes_into_rank0s_tag_and_takes_its_outcome(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    outcome = object()
    group = ScriptedGroup(1, sent=["global_step10.staging", outcome])
    got = checkpoint.save(ShardEngine(1), store, build_run_config({}), {}, None, group)
    assert got is outcome and (tmp_path / "global_step10.staging" / "shard_1.pt").is_file()

    group = ScriptedGroup(1, sent=[None, outcome])  # rank 0 skipped (no room): nothing written
    assert checkpoint.save(ShardEngine(1), store, build_run_config({}), {}, None, group) is outcome
    assert group.calls == ["gather", "broadcast", "broadcast"]
