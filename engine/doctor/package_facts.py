"""What an installed package says of itself in a file of literals (``torch/version.py``:
its version and the CUDA it was built for; DeepSpeed's build record), read without
importing it: the doctor and ``memtui run``'s GPU check answer in milliseconds, not the
seconds ``import torch`` takes. Torch-free.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
from pathlib import Path
from typing import Any


def read_module_constants(package: str, filename: str) -> dict[str, Any] | None:
    """Top-level literal assignments of ``package/filename``, without importing the package.

    None when the package is not installed; {} when the file is missing or unreadable.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            with contextlib.suppress(ValueError):
                found[target.id] = ast.literal_eval(value)
    return found
