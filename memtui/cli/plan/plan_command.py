"""``memtui plan [TARGET] [--set KEY=VALUE]... [--gpus N --gpu-memory 80G ...] [--json]``.

Will a model train on these GPUs, at which ZeRO stage and micro-batch, and how fast?
TARGET is a run config (TOML; with ``[hf]`` the plan is for ``hf.model_dir``'s
``config.json``), a Hugging Face model directory (its ``config.json``) or a run (id,
prefix or directory: the plan for the model its trainer built, against its measured peak).
Offload comes from the config's ``deepspeed_config`` (``engine.memory.offload_setting``)
unless ``--offload`` says otherwise; activation checkpointing from
``train.activation_checkpointing`` or ``--checkpointing``. The
plan itself is ``engine.memory.capacity_plan``; this module gathers its inputs (the config,
NVML when present, the flags) and prints it (``memtui.cli.plan.plan_report``). Torch-free and
instant: nothing here imports torch or DeepSpeed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtui.cli.arguments import positive_float, positive_int, sequence_length
from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.config.run_config import RunConfig
    from engine.memory.capacity_plan import PlanRequest
    from engine.memory.transformer_shape import TransformerShape
    from memtui.cli.plan.plan_hardware import Hardware, SeenGpu


def add_parser(sub: Any) -> None:
    """Register ``plan`` on ``memtui``'s subparsers."""
    plan = sub.add_parser(
        "plan",
        help="will it fit, at which ZeRO stage and micro-batch, how fast (before a run)",
        description=(
            "Per-GPU memory broken down, the largest micro-batch at every ZeRO stage and offload, "
            "a recommendation with its reason, host memory for offload, and the expected step time "
            "at an assumed MFU against the interconnect. Without --gpus: the GPUs NVML sees, or "
            "this host's CPU. TARGET: a config TOML, a Hugging Face model directory (config.json) "
            "or a run (its plan against its measured peak)."
        ),
    )
    plan.add_argument("target", nargs="?", metavar="TARGET", help="CONFIG.toml, MODEL_DIR or RUN")
    plan.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set train.zero_stage=3 (repeatable)",
    )
    plan.add_argument("--gpus", type=int, metavar="N", help="GPUs per node")
    plan.add_argument("--nodes", type=positive_int, default=1, metavar="N", help="nodes (default 1)")
    plan.add_argument("--gpu-memory", metavar="SIZE", help="memory per GPU, e.g. 80G")
    plan.add_argument("--gpu", metavar="NAME", help="GPU model for its peak, e.g. H100, A100")
    plan.add_argument(
        "--peak-tflops",
        type=positive_float,
        metavar="T",
        help="one GPU's peak TFLOP/s at the run's precision (over the table)",
    )
    from engine.memory.communication import LINKS  # pure data: cheap for --help

    plan.add_argument(
        "--interconnect",
        choices=[name for name in LINKS if name != "shared-memory"],
        help="the link the collectives cross (default on 1 node: what NVML sees, else the GPU "
        "model's: NVLink 3-5 on SXM parts, PCIe on cards; infiniband on more)",
    )
    plan.add_argument(
        "--bandwidth",
        type=positive_float,
        metavar="GB/s",
        help="that link's bandwidth per GPU, one way (over the link's default)",
    )
    plan.add_argument(
        "--offload",
        choices=("none", "optimizer", "all"),
        default=None,
        help="ZeRO-Offload to host memory: optimizer states, or (stage 3) parameters too "
        "(default: what the config's deepspeed_config offloads)",
    )
    plan.add_argument(
        "--checkpointing",
        action="store_true",
        help="activation checkpointing on (default: train.activation_checkpointing)",
    )
    plan.add_argument(
        "--seq-len", type=sequence_length, metavar="N", help="tokens per sample (over the config)"
    )
    plan.add_argument(
        "--mfu",
        type=positive_float,
        default=0.4,
        metavar="F",
        help="assumed model FLOPs utilisation for the step time (default 0.4)",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as one JSON document")
    plan.set_defaults(handler=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from engine.memory.capacity_plan import make_plan
    from memtui.cli.json_document import print_json
    from memtui.cli.plan.plan_hardware import nvml_device, planned_world
    from memtui.cli.plan.plan_report import plan_document, print_plan

    seen = nvml_device()  # once: the world the config is read for, then the hardware
    config, shape, run_path = _target(args, planned_world(args, seen))
    request, hw, notes = _request(args, config, shape, seen)
    try:
        plan = make_plan(request)
    except ValueError as err:
        raise CliError(str(err), code=2) from None
    plan.notes.extend(notes)
    if config.workload and shape.source == "built-in":
        plan.notes.append(
            f"the config trains the workload {config.workload}: this plan is for the built-in model's "
            "shape in [model]; plan a Hugging Face config directory for your model's own"
        )
    measured = None
    if run_path is not None:
        from memtui.cli.plan.plan_reality import measured_against

        measured = measured_against(run_path, request)
    if args.json:
        print_json(plan_document(plan, hw, measured))
    else:
        print_plan(plan, hw, measured)
    return 0


def _target(args: argparse.Namespace, world: int | None) -> tuple[RunConfig, TransformerShape, Path | None]:
    """(config, shape, the run's directory when TARGET is a run). ``world``: the GPUs planned
    for, over which a DeepSpeed config's batch keys are resolved (as DeepSpeed would on them)."""
    from engine.config.config_file import ConfigError, load_run_config
    from engine.memory.transformer_shape import ShapeError, from_hf_config

    target = Path(args.target) if args.target else None
    try:
        if target is None or target.is_file():
            config = load_run_config(target, args.settings, world=world)
            return config, _config_shape(config, args.seq_len), None
        if target.is_dir() and not (target / "run.json").is_file():
            hf = _read_hf_config(target)
            config = load_run_config(None, args.settings, world=world)
            return config, from_hf_config(hf, str(target / "config.json"), args.seq_len), None
        run_path = target if target.is_dir() else _run_by_name(args.target)
        config = _run_config(run_path, args.settings)
        return config, _built_shape(run_path, args.seq_len) or _config_shape(config, args.seq_len), run_path
    except (ConfigError, ShapeError) as err:
        raise CliError(str(err), code=2) from None


def _config_shape(config: RunConfig, seq_len: int | None) -> TransformerShape:
    """The model a config trains: ``hf.model_dir``'s config.json, else the built-in model."""
    from engine.memory.transformer_shape import from_hf_config, from_model_config

    m = config.model
    if config.hf.model_dir is not None:
        model_dir = Path(config.hf.model_dir)
        return from_hf_config(
            _read_hf_config(model_dir), str(model_dir / "config.json"), seq_len or m.seq_len
        )
    return from_model_config(m.n_layer, m.n_head, m.d_model, seq_len or m.seq_len)


def _built_shape(run_path: Path, seq_len: int | None) -> TransformerShape | None:
    """The shape of the model the run's trainer built (``trainer_started``), at ``seq_len``
    when given; None when it announced none (an older trainer, a workload without one)."""
    import dataclasses

    from memtui.cli.plan.plan_reality import built_description

    described = built_description(run_path)
    if described is None or described.shape is None:
        return None
    return dataclasses.replace(described.shape, seq_len=seq_len) if seq_len else described.shape


def _read_hf_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    if not path.is_file():
        raise CliError(f"{directory}: no config.json (a Hugging Face model directory) or run.json (a run)", 2)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CliError(f"{path}: not readable JSON: {err}", code=2) from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: not a JSON object", code=2)
    return data


def _run_by_name(spec: str) -> Path:
    from memtui.cli.resolver import require_run

    try:
        return require_run(spec, live=False).path
    except CliError as err:
        raise CliError(f"{spec}: no such file, model directory or run ({err})", code=2) from None


def _run_config(run_path: Path, settings: list[str]) -> RunConfig:
    from engine.config.config_file import ConfigError, build_run_config, deep_merge
    from engine.config.override import OverrideError, parse_override
    from engine.run.directory import RunDir

    raw = RunDir(run_path).read_config().model_dump(mode="json")
    for text in settings:
        try:
            raw = deep_merge(raw, parse_override(text))
        except OverrideError as err:
            raise ConfigError(str(err)) from None
    return build_run_config(raw)


def _request(
    args: argparse.Namespace, config: RunConfig, shape: TransformerShape, seen: SeenGpu | None
) -> tuple[PlanRequest, Hardware, list[str]]:
    """The plan's request, the hardware it is for, and notes on where settings came from."""
    from engine.memory.capacity_plan import PlanRequest
    from engine.memory.offload_setting import OffloadError, offload_setting
    from memtui.cli.plan.plan_hardware import resolve_hardware

    if args.mfu > 1:
        raise CliError(f"--mfu: a fraction of the peak, at most 1 (got {args.mfu:g})", code=2)
    train = config.train
    try:
        setting = offload_setting(config)
    except OffloadError as err:
        raise CliError(str(err), code=2) from None
    notes = [] if args.offload else [f"offload from {key}" for key in setting.keys]
    notes += [setting.note] if setting.note and not args.offload else []
    hw = resolve_hardware(args, config, seen)
    request = PlanRequest(
        shape=shape,
        precision=train.precision,
        zero_stage=train.zero_stage,
        micro_batch=train.micro_batch,
        global_batch=train.global_batch,
        gpus_per_node=hw.gpus_per_node,
        nodes=args.nodes,
        gpu_memory=hw.memory,
        offload=args.offload or setting.offload,
        checkpointing=args.checkpointing or train.activation_checkpointing,
        peak_tflops=hw.peak_tflops,
        link=hw.link,
        assumed_mfu=args.mfu,
        context_bytes=hw.context,
        on_cpu=hw.cpu,
    )
    return request, hw, notes
