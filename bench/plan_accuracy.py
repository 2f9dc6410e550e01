"""The capacity plan against the measured peak of real runs on the CPU, and ``memtui plan``'s
wall time.

    python bench/plan_accuracy.py [--steps 4] [--micro-batch 8] [--stages 0 1 2 3] [--json PATH]
    python bench/plan_accuracy.py --presets tiny small      # the built-in model's presets instead
    python bench/plan_accuracy.py --homes /tmp/plan-acc-*   # measure runs it made before

By default a small random GPT-2 (``--layers`` x ``--width``, a byte-level BPE tokenizer of
about 2,000 tokens trained here on the standard library's source, no weights: a seeded
random initialisation), built from a config.json in a temporary directory and trained
through ``[hf]`` on that source, at each ZeRO stage with and without
``train.activation_checkpointing``. Each case is a real run through the CLI (``memtui run
--detach`` in a private MEMTUI_HOME, fixed micro-batch: ``memory.adaptive = false``), waited
for to the end. Then, from its store and ``run.json``: the largest measured step peak (the
trainer's RSS after a forward, the CPU's stand-in for device memory, less any chaos ballast)
beside the plan (``engine.memory.capacity_plan`` for the model's shape from its config.json,
the run's precision, stage, micro-batch and checkpointing, ``on_cpu``), and their ratio
(predicted / measured: above 1 the plan is cautious). The last loss is printed too: with and
without checkpointing a stage trains to the same losses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.config.run_config import RunConfig
from engine.memory.capacity_plan import CPU_RUNTIME_BYTES, PlanRequest, breakdown
from engine.memory.transformer_shape import TransformerShape, from_hf_config, from_model_config
from engine.run.directory import RunDir, list_runs
from engine.run.storage.store import Store

MEMTUI = [sys.executable, "-m", "memtui.cli.main"]
ENDED = ("completed", "failed", "stopped", "interrupted")
MIB = 1 << 20
UNBOUNDED = 1 << 62  # bytes: the plan's capacity plays no part in the breakdown
EOS = "<|endoftext|>"


def memtui(env: dict[str, str], *argv: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMTUI, *argv], capture_output=True, text=True, env=env, timeout=timeout)


# ------------------------------------------------------------------------ the GPT-2


def stdlib_texts() -> list[str]:
    """Paragraphs of a few standard-library modules: text every machine has."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for name in ("argparse.py", "typing.py", "dataclasses.py", "inspect.py"):
        source = (stdlib / name).read_text(encoding="utf-8")
        texts += [p.strip() for p in source.split("\n\n") if len(p.strip()) > 40]
    return texts


def make_gpt2(directory: Path, layers: int, width: int, seq_len: int) -> Path:
    """config.json and a tokenizer for a random GPT-2 (no weights), and data.jsonl beside."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    directory.mkdir(parents=True, exist_ok=True)
    texts = stdlib_texts()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe_trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, bpe_trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS)
    tokenizer.save_pretrained(directory)
    eos = tokenizer.eos_token_id
    transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=seq_len,
        n_embd=width,
        n_layer=layers,
        n_head=max(1, width // 32),
        bos_token_id=eos,
        eos_token_id=eos,
    ).save_pretrained(directory)
    (directory / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return directory


def gpt2_config(model_dir: Path, seq_len: int, steps: int, micro_batch: int, precision: str) -> str:
    """The run config (TOML) every HF case starts from; the stage and the key are --set."""
    return (
        f'name = "gpt2"\nsteps = {steps}\n[model]\nseq_len = {seq_len}\n'
        f'[train]\nprecision = "{precision}"\nmicro_batch = {micro_batch}\nglobal_batch = {micro_batch}\n'
        f'[hf]\nmodel_dir = "{model_dir}"\ndata = "{model_dir / "data.jsonl"}"\n'
    )


# ------------------------------------------------------------------------ the runs


def run_case(source: list[str], label: str, stage: int, checkpointing: bool, steps: int) -> dict[str, Any]:
    """A real run in a fresh MEMTUI_HOME to its end, then its measured peak against the plan.

    ``source``: a config file, or ``--preset NAME``."""
    home = Path(tempfile.mkdtemp(prefix="plan-acc-"))
    env = dict(os.environ, MEMTUI_HOME=str(home))
    sets = {
        "train.zero_stage": stage,
        "train.activation_checkpointing": str(checkpointing).lower(),
        "memory.adaptive": "false",
        "checkpoint.every_steps": 0,
    }
    argv = [*source, "--steps", str(steps), "--name", label, "--detach"]
    started = memtui(env, "run", *argv, *(f"--set={k}={v}" for k, v in sets.items()))
    if started.returncode != 0:
        return {"case": label, "zero_stage": stage, "checkpointing": checkpointing, "error": started.stderr}
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline and measure_case(home)["state"] not in ENDED:
        time.sleep(2)
    return measure_case(home)


def shape_of(config: RunConfig) -> TransformerShape:
    m = config.model
    if config.hf.model_dir is None:
        return from_model_config(m.n_layer, m.n_head, m.d_model, m.seq_len)
    path = Path(config.hf.model_dir) / "config.json"
    return from_hf_config(json.loads(path.read_text()), str(path), seq_len=m.seq_len)


def planned(config: RunConfig, micro_batch: int) -> dict[str, int]:
    """The plan's bytes for one rank at ``micro_batch``, by part."""
    t = config.train
    b = breakdown(
        PlanRequest(
            shape=shape_of(config),
            precision=t.precision,
            zero_stage=t.zero_stage,
            micro_batch=micro_batch,
            global_batch=t.global_batch,
            gpus_per_node=1,
            nodes=1,
            gpu_memory=UNBOUNDED,
            checkpointing=t.activation_checkpointing,
            context_bytes=CPU_RUNTIME_BYTES,
            on_cpu=True,
        )
    )
    states = b.params + b.grads + b.optimizer + b.gathered
    return {
        "states": states,
        "activations": b.activations,
        "margin": b.cuda_context + b.allocator,
        "total": b.total,
    }


def measure_case(home: Path) -> dict[str, Any]:
    """The one run in ``home``: its state, its largest step peak and the plan beside it."""
    runs = list_runs(home)
    if not runs or not runs[0].store.exists():
        return {"state": "starting"}
    run: RunDir = runs[0]
    config = run.read_config()
    with Store(run.store, readonly=True) as store:
        state = store.read_meta().state or "starting"
        samples = store.steps()
    case = {
        "case": config.name,
        "params": shape_of(config).params(),
        "zero_stage": config.train.zero_stage,
        "checkpointing": config.train.activation_checkpointing,
        "state": state,
        "steps": len(samples),
    }
    peaks = [s for s in samples if s.mem_step_peak is not None]
    if not peaks:
        return case
    top = max(peaks, key=lambda s: (s.mem_step_peak or 0) - (s.mem_ballast or 0))
    measured = (top.mem_step_peak or 0) - (top.mem_ballast or 0)
    plan = planned(config, top.micro_batch)
    return case | {
        "micro_batch": top.micro_batch,
        "measured_peak": measured,
        "plan": plan,
        "ratio": plan["total"] / measured,
        "last_loss": samples[-1].loss,
        "step_time_s": statistics.median(s.step_time_s for s in samples),
    }


def plan_wall_time(rounds: int = 5) -> dict[str, Any]:
    """``memtui plan --json`` in fresh processes: median seconds, and whether torch came in."""
    code = (
        "import contextlib, io, sys, time\n"
        "t = time.perf_counter()\n"
        "from memtui.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', '--json'])\n"
        "print(time.perf_counter() - t, 'torch' in sys.modules)\n"
    )
    inner, outer = [], []
    torch_seen = False
    for _ in range(rounds):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        outer.append(time.perf_counter() - t)
        seconds, seen = done.stdout.split()
        inner.append(float(seconds))
        torch_seen |= seen == "True"
    return {
        "plan_s_in_process": statistics.median(inner),
        "plan_s_with_interpreter": statistics.median(outer),
        "torch_imported": torch_seen,
    }


# ------------------------------------------------------------------------ report


def print_table(cases: list[dict[str, Any]]) -> None:
    print(
        f"{'case':<14} {'ckpt':<4} {'state':<10} {'mb':>3} {'measured':>9} {'plan':>9} {'ratio':>6}"
        f"  {'states':>7} {'activ.':>7} {'margin':>7}  {'loss':>7}"
    )
    for c in cases:
        label = f"{c.get('case', '?')} z{c.get('zero_stage')}"
        ckpt = "on" if c.get("checkpointing") else "off"
        if "plan" not in c:
            print(f"{label:<14} {ckpt:<4} {c.get('state', c.get('error', '?'))}")
            continue
        p = c["plan"]
        print(
            f"{label:<14} {ckpt:<4} {c['state']:<10} {c['micro_batch']:>3}"
            f" {c['measured_peak'] / MIB:>5.0f} MiB {p['total'] / MIB:>5.0f} MiB {c['ratio']:>6.2f}"
            f"  {p['states'] / MIB:>7.1f}"
            f" {p['activations'] / MIB:>7.1f} {p['margin'] / MIB:>7.1f}  {c['last_loss']:>7.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", help="built-in presets (tiny, small) instead of the GPT-2")
    parser.add_argument("--stages", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    parser.add_argument("--micro-batch", type=int, default=8, help="samples per micro-batch (GPT-2)")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sample (GPT-2)")
    parser.add_argument("--layers", type=int, default=4, help="GPT-2 blocks")
    parser.add_argument("--width", type=int, default=128, help="GPT-2 hidden size (heads of 32)")
    parser.add_argument("--precision", default="fp32", help="GPT-2 runs (fp16 on a CPU is ~50x slower)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--homes", nargs="+", type=Path, help="measure runs made before (one per home)")
    args = parser.parse_args()
    began = time.monotonic()
    if args.homes:
        cases = [measure_case(h) for h in args.homes]
    elif args.presets:
        cases = [
            run_case(["--preset", p], p, s, ckpt, args.steps)
            for p in args.presets
            for s in args.stages
            for ckpt in (False, True)
        ]
    else:
        work = Path(tempfile.mkdtemp(prefix="plan-acc-gpt2-"))
        model_dir = make_gpt2(work / "gpt2", args.layers, args.width, args.seq_len)
        config = work / "gpt2.toml"
        config.write_text(gpt2_config(model_dir, args.seq_len, args.steps, args.micro_batch, args.precision))
        cases = [
            run_case([str(config)], "gpt2", s, ckpt, args.steps)
            for s in args.stages
            for ckpt in (False, True)
        ]
    cases.sort(key=lambda c: (c.get("case", ""), c.get("zero_stage") or 0, c.get("checkpointing", False)))
    timing = plan_wall_time()
    print_table(cases)
    print(
        f"memtui plan --json: {timing['plan_s_in_process'] * 1000:.0f} ms in process, "
        f"{timing['plan_s_with_interpreter'] * 1000:.0f} ms with the interpreter's start "
        f"(median of 5); torch imported: {timing['torch_imported']}"
    )
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        document = {
            "settings": settings,
            "bench_s": time.monotonic() - began,
            "cases": cases,
            "plan_time": timing,
            "date": time.strftime("%F"),
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
