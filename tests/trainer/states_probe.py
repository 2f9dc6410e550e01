"""Run as a script: the bytes of the model states a real DeepSpeed engine holds for the
``tiny`` preset on the CPU, at the step boundary after one optimizer step.

    python tests/trainer/states_probe.py STAGE   ->   {"params": P, "held": BYTES}

Counts every tensor storage reachable from the engine (its module, optimizer and their
buffers; not the workload's corpus), once per storage. In a fresh process: each engine gets
its own torch.distributed world.
"""

from __future__ import annotations

import gc
import json
import sys
import types
from typing import Any

import torch

from engine.config.config_file import build_run_config
from engine.trainer.loop import build_engine
from engine.trainer.ranks.process_group import ensure_single_process_env
from engine.trainer.workloads.model import parameter_count
from engine.trainer.workloads.workload import load_workload

SKIP = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def held_bytes(root: Any, exclude: Any) -> int:
    """Bytes of the distinct tensor storages reachable from ``root`` (not through ``exclude``)."""
    storages: dict[int, int] = {}
    stack, visited = [root], set()
    while stack:
        obj = stack.pop()
        if id(obj) in visited or isinstance(obj, SKIP) or obj is exclude:
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
            if obj.grad is not None:
                stack.append(obj.grad)
            continue
        stack.extend(gc.get_referents(obj))
    return sum(storages.values())


def main() -> None:
    ensure_single_process_env()
    config = build_run_config({"train": {"zero_stage": int(sys.argv[1])}})
    workload = load_workload(config)
    engine = build_engine(config, workload)
    loss = engine(*workload.batch(0, 0, config.train.micro_batch))
    engine.backward(loss)
    engine.step()
    del loss
    gc.collect()
    print(json.dumps({"params": parameter_count(workload.model), "held": held_bytes(engine, workload)}))


if __name__ == "__main__":
    main()
