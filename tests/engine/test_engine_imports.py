"""The supervisor side of the engine never imports torch, deepspeed or textual."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MODULES = [
    "engine.run.store",
    "engine.supervisor.daemon",
    "engine.run.launch",
    "engine.run.status",
    "engine.supervisor.peer",
    "engine.__main__",
]


@pytest.mark.parametrize("module", MODULES)
def test_module_is_torch_free(module: str) -> None:
    code = (
        f"import importlib, json, sys; importlib.import_module({module!r}); "
        "print(json.dumps(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('torch', 'deepspeed', 'textual'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == []
