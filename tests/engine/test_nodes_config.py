"""Several nodes, without torch: the config's node keys and their errors, the torchrun
command each node's supervisor builds, the shared checkpoint directory, the follower's
outcome file and the node line in ``memtui status``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from engine.config.config_file import ConfigError, build_run_config
from engine.rendezvous import rendezvous_id
from engine.run.directory import RunDir
from engine.run.node_outcome import follower_leader, read_node_outcome, write_node_outcome
from engine.run.reports.status import offline_status
from engine.supervisor.trainers.trainer_process import (
    STORE_TIMEOUT_MARGIN_S,
    Placement,
    default_trainer_command,
)
from memtui.cli.runs.lifecycle_commands import node_settings
from memtui.status_report import render_status


def two_nodes(node_rank: int, shared: Path) -> dict:
    return {
        "name": "nodes",
        "train": {"nodes": 2, "node_rank": node_rank, "rdzv_endpoint": "10.0.0.1:29500", "global_batch": 16},
        "checkpoint": {"dir": str(shared)},
    }


@pytest.mark.parametrize(
    ("train", "checkpoint", "line"),
    [
        (
            {"nodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1", "global_batch": 16},
            {"dir": "/x"},
            "node_rank (2) must be below nodes (2)",
        ),
        (
            {"nodes": 2, "global_batch": 16},
            {"dir": "/x"},
            "rdzv_endpoint (HOST:PORT on node 0) is needed with nodes > 1",
        ),
        (
            {"nodes": 2, "rdzv_endpoint": "h:1", "global_batch": 16},
            {},
            "checkpoint.dir is needed with train.nodes > 1",
        ),
        ({"nodes": 2, "rdzv_endpoint": "h:1"}, {"dir": "/x"}, "micro_batch x ranks x nodes (8 x 1 x 2)"),
        ({"nodes": 2, "rdzv_endpoint": "no-port", "global_batch": 16}, {"dir": "/x"}, "train.rdzv_endpoint"),
    ],
)
def test_node_keys_are_checked_naming_the_key(train: dict, checkpoint: dict, line: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(line)):
        build_run_config({"train": train, "checkpoint": checkpoint})


def test_each_node_launches_torchrun_at_the_static_rendezvous(tmp_path: Path) -> None:
    config = build_run_config(two_nodes(1, tmp_path))
    assert config.train.world_size == 2
    command = default_trainer_command({}, Placement.of(config))
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=1",
        "--rdzv-backend=static",
        "--rdzv-endpoint=10.0.0.1:29500",
        f"--rdzv-id={rendezvous_id(config)}",
        "--max-restarts=0",
    } <= set(command)
    assert "--standalone" not in command and command[-2:] == ["-m", "engine.trainer"]
    one_host = default_trainer_command(
        {}, Placement.of(build_run_config({"train": {"ranks": 2, "global_batch": 16}}))
    )
    assert "--standalone" in one_host and "--nproc-per-node=2" in one_host


def test_the_placement_reads_the_train_section_instead_of_copying_it(tmp_path: Path) -> None:
    follower, leader = (Placement.of(build_run_config(two_nodes(k, tmp_path))) for k in (1, 0))
    assert follower.train.node_rank == 1 and follower.follower and not leader.follower
    config = build_run_config(
        {**two_nodes(0, tmp_path), "train": {**two_nodes(0, tmp_path)["train"], "rdzv_timeout_s": 900}}
    )
    place = Placement.of(config)
    assert place.train is config.train  # one place for ranks, nodes, node_rank, the endpoint
    assert f"--rdzv-conf=timeout={900 + STORE_TIMEOUT_MARGIN_S}" in place.torchrun_args()  # past the join


def test_checkpoints_link_to_the_shared_directory(home: Path) -> None:
    tmp_path = home
    shared = tmp_path / "shared" / "ckpt"
    runs = [RunDir.create(build_run_config(two_nodes(k, shared)), home=tmp_path / f"host{k}") for k in (0, 1)]
    for run in runs:
        assert run.checkpoints.is_symlink() and run.checkpoints.resolve() == shared.resolve()
        # an OOM's micro-batch for the next attempt: one file every node's ranks read
        assert run.geometry_file.resolve() == shared.resolve() / "memory.json"
    (runs[1].checkpoints / "written-by-node-1").write_text("x")
    assert (runs[0].checkpoints / "written-by-node-1").is_file()


def test_the_follower_outcome_is_read_for_its_attempt_only(home: Path) -> None:
    tmp_path = home
    run = RunDir.create(build_run_config({}), home=tmp_path)
    assert read_node_outcome(run, 1) is None
    write_node_outcome(run, 2, "stopped")
    assert read_node_outcome(run, 2) == "stopped" and read_node_outcome(run, 3) is None
    assert follower_leader({"LOCAL_RANK": "0", "RANK": "1"})
    assert not follower_leader({"LOCAL_RANK": "0", "RANK": "0"})
    assert not follower_leader({"LOCAL_RANK": "1", "RANK": "1"})


def test_status_says_which_node_and_whom_it_follows(home: Path) -> None:
    tmp_path = home
    follower = RunDir.create(build_run_config(two_nodes(1, tmp_path / "ck")), home=tmp_path / "b")
    text = render_status(offline_status(follower), now=0.0)
    assert "follows node 0 (rendezvous 10.0.0.1:29500)" in text
    leader = RunDir.create(build_run_config(two_nodes(0, tmp_path / "ck")), home=tmp_path / "a")
    assert "node 0 of 2" in (offline_status(leader).node or "")
    alone = RunDir.create(build_run_config({}), home=tmp_path / "c")
    assert offline_status(alone).node is None


def test_node_flags_become_settings() -> None:
    class Args:
        nodes, node_rank, rdzv_endpoint, rdzv_id = 2, 1, "h:29500", None

    assert node_settings(Args()) == ["train.nodes=2", "train.node_rank=1", 'train.rdzv_endpoint="h:29500"']  # type: ignore[arg-type]


def test_resume_at_another_rank_count_rewrites_the_config_or_refuses(home: Path) -> None:
    from memtui.cli.runs.resumption import ResumeRefused, change_ranks

    run = RunDir.create(build_run_config({"train": {"ranks": 2, "global_batch": 16}}), home=home)
    created = run.created_at()
    change_ranks(run, 1)
    assert run.read_config().train.ranks == 1 and run.created_at() == created
    with pytest.raises(
        ResumeRefused, match=re.escape("--ranks 3: train: Value error, global_batch (16) must be")
    ):
        change_ranks(run, 3)
    assert run.read_config().train.ranks == 1  # nothing written


@pytest.mark.deepspeed
def test_a_failed_conversion_says_how_to_convert_by_hand(tmp_path: Path) -> None:
    from engine.trainer.checkpoints.universal_checkpoint import UniversalConversionFailed, convert

    tag = tmp_path / "global_step10"
    tag.mkdir()
    with pytest.raises(UniversalConversionFailed) as caught:
        convert(tag, saved_world=2, world=1)
    message = str(caught.value)
    assert message.startswith("global_step10 was written by 2 ranks and this attempt has 1")
    assert (
        "Resume with 2 ranks, or convert by hand: -m deepspeed.checkpoint.ds_to_universal --input_folder"
        in message
    )
