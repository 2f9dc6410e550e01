"""Trainer pieces that need no DeepSpeed engine: config, data, model, schedule, link."""

from __future__ import annotations

import math
import socket
import stat
import sys
import types
from pathlib import Path

import pytest
import torch

from engine.config.config_file import build_run_config, deep_merge
from engine.config.deepspeed_config import build_deepspeed_config, grad_accum_steps
from engine.config.run_config import OWNED_DEEPSPEED_KEYS, RunConfig
from engine.events import FreshStart, RunPaused, TrainerFinished
from engine.run.report_spool import SpoolWriter, spool_lines
from engine.trainer.checkpoints.checkpoint import tags_to_prune
from engine.trainer.link import NullLink, SocketLink
from engine.trainer.lr_schedule import lr_ratio
from engine.trainer.workloads.corpus import ByteCorpus, read_corpus
from engine.trainer.workloads.model import VOCAB_SIZE, ByteTransformer
from engine.trainer.workloads.workload import Workload, WorkloadError, load_workload
from engine.wire.protocol import CoreShare, TrainerCommand, TrainerEvent, decode_client, encode
from tests.waiting import wait_for

# ----------------------------------------------------------------- deepspeed config


def test_grad_accum_is_global_over_micro_times_world() -> None:
    assert grad_accum_steps(64, 8, 1) == 8
    assert grad_accum_steps(64, 8, 4) == 2
    with pytest.raises(ValueError, match="not a multiple"):
        grad_accum_steps(64, 8, 3)


def test_deepspeed_config_from_run_config() -> None:
    config = build_run_config(
        {"train": {"micro_batch": 4, "global_batch": 32, "zero_stage": 2, "grad_clip": 0.5}}
    )
    ds = build_deepspeed_config(config, world_size=2)
    assert ds["train_batch_size"] == 32
    assert ds["train_micro_batch_size_per_gpu"] == 4
    assert ds["gradient_accumulation_steps"] == 4  # 32 / (4 x 2)
    assert ds["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 12}
    assert ds["bf16"] == {"enabled": False}
    assert ds["zero_optimization"] == {"stage": 2}
    assert ds["gradient_clipping"] == 0.5
    assert ds["optimizer"]["type"] == "AdamW"
    assert ds["optimizer"]["params"]["lr"] == config.train.lr
    assert ds["steps_per_print"] > 10**9
    assert ds["wall_clock_breakdown"] is False


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_precision_sections(precision: str) -> None:
    ds = build_deepspeed_config(build_run_config({"train": {"precision": precision}}))
    assert ds["fp16"]["enabled"] is False
    assert ds["bf16"]["enabled"] is (precision == "bf16")


def test_user_keys_pass_through_and_owned_keys_win() -> None:
    config = build_run_config({"train": {"zero_stage": 1}})
    # Owned keys are refused at validation; model_copy bypasses it to prove the builder
    # still puts ours on top should one slip through.
    user = {
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 123, "overlap_comm": True},
        "fp16": {"enabled": False, "loss_scale_window": 200},
        "train_batch_size": 999,
        "optimizer": {"params": {"lr": 0.5}},
        "activation_checkpointing": {"partition_activations": True},
    }
    config = config.model_copy(update={"deepspeed_config": user})
    ds = build_deepspeed_config(config)
    assert ds["zero_optimization"] == {"stage": 1, "reduce_bucket_size": 123, "overlap_comm": True}
    assert ds["fp16"]["enabled"] is True and ds["fp16"]["loss_scale_window"] == 200
    assert ds["train_batch_size"] == config.train.global_batch
    assert ds["optimizer"] == {"type": "AdamW", "params": {**ds["optimizer"]["params"], "lr": 0.5}}
    assert ds["activation_checkpointing"] == {"partition_activations": True}
    assert user["zero_optimization"]["stage"] == 3  # the user's dict is not mutated


def test_every_owned_key_is_set() -> None:
    ds = build_deepspeed_config(build_run_config({}))
    for dotted in OWNED_DEEPSPEED_KEYS:
        node = ds
        for part in dotted.split("."):
            node = node[part]
        assert node is not None


def test_deep_merge() -> None:
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"c": 3}, "e": 4}) == {
        "a": {"b": 1, "c": 3},
        "d": 1,
        "e": 4,
    }


# --------------------------------------------------------------------------- corpus


@pytest.fixture(scope="module")
def corpus() -> ByteCorpus:
    return ByteCorpus.load(seq_len=64, seed=7, cap_bytes=1 << 20)


def test_corpus_is_stdlib_source_bytes() -> None:
    data = read_corpus(cap_bytes=1 << 16)
    assert data.dtype == torch.uint8 and len(data) == 1 << 16
    assert b"def " in bytes(data.tolist())


def test_batches_are_deterministic_in_seed_step_micro(corpus: ByteCorpus) -> None:
    x, y = corpus.batch(step=5, micro=1, micro_batch=4)
    assert x.shape == y.shape == (4, 64) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    again = ByteCorpus(corpus.train, corpus.heldout, corpus.seq_len, corpus.seed).batch(5, 1, 4)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])
    assert not torch.equal(x, corpus.batch(6, 1, 4)[0])
    assert not torch.equal(x, corpus.batch(5, 0, 4)[0])
    other_seed = ByteCorpus(corpus.train, corpus.heldout, corpus.seq_len, seed=8)
    assert not torch.equal(x, other_seed.batch(5, 1, 4)[0])


def test_heldout_batches(corpus: ByteCorpus) -> None:
    x, y = corpus.heldout_batch(0, 2)
    assert x.shape == (2, 64)
    assert torch.equal(x, corpus.heldout_batch(0, 2)[0])


# ---------------------------------------------------------------------------- model


def test_model_forward_shape_and_initial_loss() -> None:
    torch.manual_seed(0)
    config = build_run_config({})
    model = ByteTransformer(config.model)
    x = torch.randint(0, VOCAB_SIZE, (3, config.model.seq_len))
    y = torch.randint(0, VOCAB_SIZE, (3, config.model.seq_len))
    assert model.logits(x).shape == (3, config.model.seq_len, VOCAB_SIZE)
    loss = model(x, y)
    assert loss.shape == () and abs(loss.item() - math.log(VOCAB_SIZE)) < 0.1  # ~5.55 nats


def test_model_head_is_tied() -> None:
    model = ByteTransformer(build_run_config({}).model)
    assert model.head.weight is model.tok_emb.weight


def test_model_half_on_cpu_matches_float() -> None:
    torch.manual_seed(0)
    model = ByteTransformer(build_run_config({}).model)
    x = torch.randint(0, VOCAB_SIZE, (2, 32))
    full = model(x, x).item()
    half = model.half()(x, x).item()
    assert abs(full - half) < 0.02


# ------------------------------------------------------------------------- schedule


def test_lr_schedule_warms_up_then_decays_to_min() -> None:
    assert lr_ratio(0, 10, 100, 0.1) == pytest.approx(1 / 11)  # step 0 already moves
    assert lr_ratio(9, 10, 100, 0.1) == pytest.approx(10 / 11)
    assert lr_ratio(10, 10, 100, 0.1) == pytest.approx(1.0)
    assert lr_ratio(55, 10, 100, 0.1) == pytest.approx(0.55)  # halfway down the cosine
    assert lr_ratio(100, 10, 100, 0.1) == pytest.approx(0.1)
    assert lr_ratio(500, 10, 100, 0.1) == pytest.approx(0.1)
    assert lr_ratio(0, 0, 100, 0.1) == pytest.approx(1.0)
    ratios = [lr_ratio(s, 10, 100, 0.1) for s in range(10, 101)]
    assert ratios == sorted(ratios, reverse=True)


# ----------------------------------------------------------------------- checkpoints


def test_prune_keeps_the_newest() -> None:
    tags = [(100, "global_step100"), (300, "global_step300"), (200, "global_step200"), (50, "global_step50")]
    assert tags_to_prune(tags, keep=2, newest="global_step300") == ["global_step100", "global_step50"]
    assert tags_to_prune(tags, keep=10, newest="global_step300") == []
    # The tag just written survives even if an older run left higher-numbered tags.
    assert "global_step200" not in tags_to_prune(tags, keep=1, newest="global_step200")


# -------------------------------------------------------------------------- workload


def test_builtin_workload() -> None:
    workload = load_workload(build_run_config({}))
    assert isinstance(workload.model, ByteTransformer)
    assert workload.tokens_per_sample == 128
    x, y = workload.batch(0, 0, 2)
    assert workload.model(x, y).shape == ()


def _user_module(monkeypatch: pytest.MonkeyPatch, **attrs: object) -> None:
    module = types.ModuleType("memtui_test_workload")
    module.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, "memtui_test_workload", module)


def test_user_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    def build(config: RunConfig) -> Workload:
        model = torch.nn.Linear(4, 1)
        return Workload(
            model=model,
            batch=lambda step, micro, mb: (torch.ones(mb, 4),),
            tokens_per_sample=1,
        )

    _user_module(monkeypatch, build=build)
    workload = load_workload(build_run_config({"workload": "memtui_test_workload:build"}))
    assert isinstance(workload.model, torch.nn.Linear)


@pytest.mark.parametrize(
    ("spec", "attrs", "message"),
    [
        ("no_such_module_xyz:build", {}, "cannot import 'no_such_module_xyz'"),
        ("memtui_test_workload:build", {}, "no callable 'build'"),
        ("memtui_test_workload:build", {"build": lambda c: 42}, "returned int"),
        ("memtui_test_workload:build", {"build": lambda c: 1 / 0}, "ZeroDivisionError"),
        (
            "memtui_test_workload:build",
            {"build": lambda c: Workload(model="x", batch=print, tokens_per_sample=1)},  # type: ignore[arg-type]
            "not a torch.nn.Module",
        ),
    ],
)
def test_user_workload_errors(monkeypatch: pytest.MonkeyPatch, spec: str, attrs: dict, message: str) -> None:
    _user_module(monkeypatch, **attrs)
    with pytest.raises(WorkloadError, match=message):
        load_workload(build_run_config({"workload": spec}))


# ------------------------------------------------------------------------------ link


def _drain_one(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        data += sock.recv(65536)
    return data


def test_socket_link_sends_lines_and_stops_on_command() -> None:
    ours, theirs = socket.socketpair()
    link = SocketLink(ours)
    link.event(RunPaused(step=7), "hi")
    message = decode_client(_drain_one(theirs))
    assert isinstance(message, TrainerEvent) and message.type == "run_paused" and message.data == {"step": 7}
    assert not link.stop_requested.is_set()
    theirs.sendall(b"not json\n")  # ignored, with a warning
    theirs.sendall(encode(TrainerCommand(command="stop", reason="operator")))
    assert link.stop_requested.wait(5)
    assert link.stop_reason == "operator"
    link.close()
    theirs.close()


def test_socket_link_keeps_the_latest_core_share_for_the_next_boundary() -> None:
    ours, theirs = socket.socketpair()
    link = SocketLink(ours)
    assert link.cores_for_others == 0
    theirs.sendall(encode(CoreShare(cores=1)))
    theirs.sendall(encode(TrainerCommand(command="pause")))  # read after it: the share is in
    assert link.pause_requested.wait(5) and link.cores_for_others == 1
    theirs.sendall(encode(CoreShare(cores=0)) + encode(TrainerCommand(command="resume")))
    wait_for(lambda: not link.pause_requested.is_set(), what="the resume after the share")
    assert link.cores_for_others == 0
    link.close()
    theirs.close()


def test_socket_link_stops_when_the_supervisor_hangs_up() -> None:
    ours, theirs = socket.socketpair()
    link = SocketLink(ours)
    theirs.close()
    assert link.stop_requested.wait(5)
    link.event(TrainerFinished(reason="stopped", step=1))  # dropped, not raised
    link.close()


def test_a_link_whose_supervisor_is_gone_spools_its_recent_and_later_lines(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    spool = SpoolWriter(tmp_path / "spool" / "trainer-1.ndjson")
    link = SocketLink(ours, spool=spool)
    link.event(RunPaused(step=7), "heard, maybe never stored")
    _drain_one(theirs)
    assert not spool.path.exists()  # nothing spooled while the supervisor is there
    theirs.close()
    assert link.stop_requested.wait(5)
    link.event(TrainerFinished(reason="stopped", step=8), "after the loss")
    link.close()
    kinds = [decode_client(line).data for line in spool_lines(spool.path)]  # type: ignore[union-attr]
    assert kinds == [{"step": 7}, {"reason": "stopped", "step": 8}]  # the recent line first, once
    assert stat.S_IMODE(spool.path.stat().st_mode) == 0o600


def test_a_link_lost_with_nothing_sent_after_spools_the_recent_lines_at_close(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    spool = SpoolWriter(tmp_path / "trainer-2.ndjson")
    link = SocketLink(ours, spool=spool)
    link.event(RunPaused(step=3))
    _drain_one(theirs)
    theirs.close()
    assert link.stop_requested.wait(5)
    link.close()
    assert len(spool_lines(spool.path)) == 1


def test_null_link_records() -> None:
    link = NullLink(record=True)
    link.event(FreshStart())
    assert link.sent and link.sent[0].type == "fresh_start"  # type: ignore[attr-defined]


def test_a_forward_may_return_the_loss_alone_or_with_named_scalars() -> None:
    from engine.trainer.workloads.forward_output import as_number, split_output
    from engine.trainer.workloads.workload import WorkloadError

    loss = torch.tensor(2.0)
    assert split_output(loss) == (loss, {})
    got, named = split_output((loss, {"acc": torch.tensor(0.25)}))
    assert got is loss and as_number(named["acc"]) == 0.25
    for bad in ((loss, [1.0]), [loss], "loss", (1.0, {})):
        with pytest.raises(WorkloadError, match="forward returned"):
            split_output(bad)
