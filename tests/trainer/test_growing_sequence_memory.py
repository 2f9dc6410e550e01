"""Sequence lengths that vary, with real DeepSpeed on the CPU.

The sequence length doubles mid-run under a CPU budget: the controller shrinks the
micro-batch before the longer step (or, at most once, redoes an OOM in place), the global
batch is kept, and tokens count what each step trained.

A static run (``memory.adaptive = false``) measures the step peak (process RSS after each
forward) at micro-batch 16 with sequences of 128 tokens (steps 1-8) and of 256 (from step
9). The budget is set between the two peaks. The adaptive run then trains the same data
with ``memory.cpu_enforce`` (an RSS over the budget after a forward is an OOM).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_fixture import make_model_dir, sample_texts, write_jsonl
from trainer_harness import SupervisorStub, make_run, run_trainer

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.trainer.workloads.hf_workload import hf_workload
from engine.trainer.workloads.step_lengths import StepLengths

pytestmark = pytest.mark.deepspeed

MODEL = {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 256}
START, DOUBLED_AT = 128, 8  # tokens per sample before step DOUBLED_AT (0-based), then 256
BATCH = 16


def raw(steps: int, memory: dict[str, object]) -> dict[str, object]:
    growth = {"seq_len_start": START, "seq_len_doubling_steps": DOUBLED_AT}
    return {
        "name": "grow",
        "steps": steps,
        "model": MODEL | growth,
        "checkpoint": {"every_steps": 0},
        "train": {"micro_batch": BATCH, "global_batch": BATCH, "precision": "fp32"},
        "memory": memory,
    }


def attempt(run: RunDir) -> SupervisorStub:
    supervisor = SupervisorStub(run.socket)
    done = run_trainer(run, 1, 300.0)
    supervisor.close()
    assert done.returncode == 0, done.stdout + done.stderr
    return supervisor


def tokens_until(step: int) -> int:
    """Tokens steps 1..step train: BATCH samples of 128, then of 256 tokens."""
    short = min(step, DOUBLED_AT)
    return BATCH * (START * short + 2 * START * (step - short))


def test_sequences_doubling_under_a_budget_shrink_the_micro_batch_before_the_longer_step() -> None:
    static = attempt(make_run(raw(12, {"adaptive": False}))).samples
    assert {s.micro_batch for s in static} == {BATCH}
    short = max(s.mem_step_peak or 0 for s in static[1:DOUBLED_AT])  # the first step left out
    long = max(s.mem_step_peak or 0 for s in static[DOUBLED_AT + 1 :])
    assert long > short, (short, long)
    budget = (short + long) // 2

    supervisor = attempt(
        make_run(raw(16, {"budget": budget, "cpu_enforce": True, "throughput_margin": 0.99}))
    )
    samples = supervisor.samples
    adapted = supervisor.events("memory_adapted")
    story = f"static peaks {short}, {long}; budget {budget}; changes {[e.data for e in adapted]}"
    assert [s.step for s in samples] == list(range(1, 17)), story
    assert all(s.samples == BATCH * s.step for s in samples), story  # samples per optimizer step kept
    assert all(s.micro_batch * s.grad_accum * s.world_size == BATCH for s in samples), story
    assert [s.tokens for s in samples] == [tokens_until(s.step) for s in samples], story

    micro = [s.micro_batch for s in samples]  # micro[i] ran step i (0-based)
    assert micro[:DOUBLED_AT] == [BATCH] * DOUBLED_AT, story  # the short sequences fit
    assert max(micro[DOUBLED_AT:]) < BATCH, story  # the longer ones never ran at 16
    ooms = [e for e in adapted if e.data["kind"] == "oom"]
    assert len(ooms) <= 1, story
    first = adapted[0].data
    assert first["from_micro_batch"] == BATCH, story
    if first["kind"] == "shrink":  # predicted: shrunk before the step (0-based index), saying why
        assert first["step"] == DOUBLED_AT, story
        assert "the data grew from 128 to 256 tokens per sample" in first["reason"], story
    else:  # an OOM redone in place names the step redone (1-based, as telemetry does)
        assert first["kind"] == "oom" and first["step"] == DOUBLED_AT + 1, story
    assert all((s.mem_step_peak or 0) <= budget for s in samples[DOUBLED_AT + 1 :]), story


def test_documents_of_their_own_length_train_through_micro_batch_changes(tmp_path: Path) -> None:
    """``hf.packing = false`` on a tiny GPT-2: the controller grows the micro-batch from 2
    to 8 (blocks of different lengths joined with their padding), every step keeps the
    global batch, and tokens are the documents' tokens, not 64 per sample."""
    pytest.importorskip("transformers")
    make_model_dir(tmp_path / "model", weights=False)
    write_jsonl(tmp_path / "data.jsonl", sample_texts())
    hf = {"model_dir": str(tmp_path / "model"), "data": str(tmp_path / "data.jsonl"), "packing": False}
    raw = {
        "name": "docs",
        "steps": 8,
        "model": {"seq_len": 64},
        "hf": hf,
        "checkpoint": {"every_steps": 0},
        "train": {"micro_batch": 2, "global_batch": 8, "precision": "fp32"},
        "memory": {"max_micro_batch": 8, "steady_steps": 1, "cooldown_steps": 0, "throughput_margin": 0.99},
    }
    supervisor = attempt(make_run(raw))
    samples = supervisor.samples
    story = f"{[(s.step, s.micro_batch, s.tokens) for s in samples]}"
    assert [s.step for s in samples] == list(range(1, 9)), story
    assert all(s.samples == 8 * s.step for s in samples), story
    assert max(s.micro_batch for s in samples) > 2, story  # blocks were joined
    workload = hf_workload(build_run_config(raw), tmp_path / "cache")
    assert workload.lengths is not None
    lengths = StepLengths(workload.lengths, base_micro_batch=2, global_batch=8)
    assert [s.tokens for s in samples] == [lengths.tokens_before(s.step) for s in samples], story
    assert samples[-1].tokens < 8 * 8 * 64, story  # padding is not counted
