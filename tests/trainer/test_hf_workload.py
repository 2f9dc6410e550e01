"""The user's own model: a tiny Hugging Face causal LM (random weights, built from a config
into a temporary directory) and its tokenizer, on a local JSONL file.

Without DeepSpeed: the workload builds from the directory with or without weights, its
batches are a pure function of (step, micro), the dataset is tokenized once (the cache is
read the second time), and every missing or malformed input is a ``WorkloadError`` naming
the file. With DeepSpeed, through the real CLI and supervisor: a run stopped and resumed
gets the same loss at the same step as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hf_fixture import make_model_dir, sample_texts, write_jsonl

from engine.config.config_file import ConfigError, build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.trainer.workloads import token_cache
from engine.trainer.workloads.hf_workload import hf_workload
from engine.trainer.workloads.workload import WorkloadError
from memtui.cli.main import main
from tests.waiting import wait_for

pytest.importorskip("transformers")
MEMTUI = str(Path(sys.executable).with_name("memtui"))
STEPS = 150  # a stop after step 10 lands long before the end, even on a fast machine


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mthf", dir="/tmp"))
    make_model_dir(path / "model", weights=False)
    make_model_dir(path / "weighted", weights=True)
    write_jsonl(path / "data.jsonl", sample_texts())
    yield path
    shutil.rmtree(path, ignore_errors=True)


def hf_config(scratch: Path, model: str = "model", **hf: str) -> dict:
    return {
        "name": "hf",
        "model": {"seq_len": 64},
        "hf": {"model_dir": str(scratch / model), "data": str(scratch / "data.jsonl"), **hf},
    }


@pytest.mark.parametrize("model", ["model", "weighted"])
def test_the_workload_builds_and_its_batches_are_pure(scratch: Path, model: str) -> None:
    config = build_run_config(hf_config(scratch, model))
    workload = hf_workload(config, scratch / "cache")
    x, y = workload.batch(3, 1, 4)
    again_x, again_y = hf_workload(config, scratch / "cache").batch(3, 1, 4)
    assert x.shape == (4, 64) and torch.equal(x, again_x) and torch.equal(y, again_y)
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one token
    assert not torch.equal(x, workload.batch(4, 1, 4)[0])
    loss = workload.model(x, y)
    assert loss.ndim == 0 and 4.0 < float(loss.detach()) < 8.0  # about ln(vocabulary) before training
    assert workload.tokens_per_sample == 64


def test_the_dataset_is_tokenized_once(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = build_run_config(hf_config(scratch))
    cache = scratch / "cache-once"
    first = hf_workload(config, cache).batch(0, 0, 2)
    assert len(list(cache.glob("*.pt"))) == 1

    def no_second_time(*_: object) -> None:
        raise AssertionError("tokenized again")

    monkeypatch.setattr(token_cache, "tokenize", no_second_time)
    second = hf_workload(config, cache).batch(0, 0, 2)
    assert torch.equal(first[0], second[0])


def test_missing_and_malformed_inputs_name_the_file(scratch: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    cases = {
        "no config.json": hf_config(scratch)
        | {"hf": {"model_dir": str(empty), "data": str(scratch / "data.jsonl")}},
        "no such directory": hf_config(scratch)
        | {"hf": {"model_dir": str(tmp_path / "nope"), "data": "x.jsonl"}},
        "no such file": hf_config(scratch)
        | {"hf": {"model_dir": str(scratch / "model"), "data": str(tmp_path / "gone.txt")}},
        "longer than": hf_config(scratch) | {"model": {"seq_len": 128}},
    }
    for words, raw in cases.items():
        with pytest.raises(WorkloadError, match=words):
            hf_workload(build_run_config(raw), tmp_path / "cache")
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(scratch / "model", no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink()
    raw = hf_config(scratch) | {"hf": {"model_dir": str(no_tokenizer), "data": str(scratch / "data.jsonl")}}
    with pytest.raises(WorkloadError, match="no usable tokenizer"):
        hf_workload(build_run_config(raw), tmp_path / "cache")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text key"}\n')
    raw = hf_config(scratch) | {"hf": {"model_dir": str(scratch / "model"), "data": str(bad)}}
    with pytest.raises(WorkloadError, match=r"bad.jsonl:2: not a JSON object with a 'text' string"):
        hf_workload(build_run_config(raw), tmp_path / "cache")


def test_config_refuses_half_an_hf_section_or_two_models() -> None:
    with pytest.raises(ConfigError, match="model_dir and data go together"):
        build_run_config({"hf": {"model_dir": "/m"}})
    with pytest.raises(ConfigError, match="workload and hf.model_dir both name the model"):
        build_run_config({"workload": "mine:build", "hf": {"model_dir": "/m", "data": "/d.txt"}})


def memtui(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    done = subprocess.run([MEMTUI, *args], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def state_of(run: RunDir) -> str | None:
    if not run.store.exists():
        return None
    with Store(run.store, readonly=True) as store:
        return store.read_meta().state


def losses(run: RunDir, attempt: int | None = None) -> dict[int, float]:
    with Store(run.store, readonly=True) as store:
        return {s.step: s.loss for s in store.steps() if attempt is None or s.attempt == attempt}


def start(home: Path, scratch: Path) -> RunDir:
    config = home / "run.toml"
    config.write_text(
        f'name = "hf"\nsteps = {STEPS}\n[model]\nseq_len = 64\n[checkpoint]\nevery_steps = 8\n'
        f'[hf]\nmodel_dir = "{scratch / "model"}"\ndata = "{scratch / "data.jsonl"}"\n'
    )
    started = json.loads(memtui(home, "run", str(config), "--detach", "--json").stdout)
    return RunDir(Path(started["run_dir"]))


@pytest.mark.deepspeed
@pytest.mark.e2e
def test_stop_and_resume_gives_the_loss_of_an_uninterrupted_run(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = scratch / "home"
    home.mkdir()
    straight = start(home, scratch)
    wait_for(lambda: state_of(straight) == "completed", timeout=240, what="the uninterrupted run")

    stopped = start(home, scratch)
    wait_for(lambda: max(losses(stopped), default=0) >= 10, timeout=240, what="step 10")
    # `memtui stop` in this process: the same command, without an interpreter's start (seconds
    # on a loaded machine, in which the run once reached step 144 of 150 before it stopped)
    monkeypatch.setenv("MEMTUI_HOME", str(home))
    assert main(["stop", stopped.run_id]) == 0
    wait_for(lambda: state_of(stopped) == "stopped", timeout=120, what="the stop")
    stop_step = max(losses(stopped))
    memtui(home, "resume", stopped.run_id, "--detach")
    wait_for(lambda: state_of(stopped) == "completed", timeout=240, what="the resumed run")

    expected, resumed = losses(straight), losses(stopped, attempt=2)
    assert stop_step < STEPS - 20, stop_step  # stopped well before the end: steps to compare
    assert sorted(resumed) == list(range(stop_step + 1, STEPS + 1))
    for step, loss in resumed.items():
        assert loss == pytest.approx(expected[step], abs=1e-3), step
