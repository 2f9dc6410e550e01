"""Where DeepSpeed's just-in-time ops are built and kept: one torch extension cache per
Python environment. Torch-free.

torch builds a JIT op into ``TORCH_EXTENSIONS_DIR/<op>/`` (default
``~/.cache/torch_extensions/py<ver>_<accel>/<op>/``, shared by every environment of a user)
and rebuilds it whenever the ``build.ninja`` it writes differs from the one there. That file
names the environment's own torch and DeepSpeed paths, so two environments sharing the
default cache (a new clone's virtual environment beside an older install) rebuild each
other's op at every start: a C++ compile of minutes, about 1.5 GB of compiler memory.

Unless the user set ``TORCH_EXTENSIONS_DIR``, memtui gives its trainers, ``memtui prepare``
and the doctor's op check a cache of their environment's own, under memtui's user cache
dir, keyed by the interpreter's prefix (``sys.prefix``: the virtual environment) and
torch's version: ``~/.cache/memtui/torch_extensions/<prefix hash>-torch<version>/``.
Every process of one environment shares it (tests included, whatever ``MEMTUI_HOME``
they use), so an op is built once per environment.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

EXTENSIONS_ENV = "TORCH_EXTENSIONS_DIR"
"""torch's variable for the root of its extension cache (read by ``torch.utils.cpp_extension``)."""
PREFIX_HASH_CHARS = 12
"""Hex digits of sha256(sys.prefix) in the directory's name: distinct per environment, short."""


def environment_key(prefix: str, torch_version: str) -> str:
    """``<sha256(prefix)[:12]>-torch<version>``: one name per environment and torch version."""
    digest = hashlib.sha256(prefix.encode()).hexdigest()[:PREFIX_HASH_CHARS]
    return f"{digest}-torch{torch_version}"


def installed_torch_version() -> str:
    """torch's version in this interpreter's environment, from its metadata (torch is not
    imported); ``none`` where torch is not installed."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def environment_extensions_dir(prefix: str | None = None, torch_version: str | None = None) -> Path:
    """memtui's extension cache for the environment at ``prefix`` (default: this
    interpreter's) with ``torch_version`` (default: the one installed here)."""
    import platformdirs

    key = environment_key(prefix or sys.prefix, torch_version or installed_torch_version())
    return Path(platformdirs.user_cache_dir("memtui")) / "torch_extensions" / key


def set_extensions_dir(environ: MutableMapping[str, str] = os.environ) -> str:
    """Give ``environ`` (this process's by default: before torch reads it) this environment's
    cache as ``TORCH_EXTENSIONS_DIR``, unless the user set one; returns the cache in use.

    Each process that loads ops calls it itself (the trainer, ``memtui prepare``'s child):
    its own interpreter keys the cache, whoever started it (a custom trainer command may
    run another interpreter than the supervisor's)."""
    if not environ.get(EXTENSIONS_ENV):
        environ[EXTENSIONS_ENV] = str(environment_extensions_dir())
    return environ[EXTENSIONS_ENV]


def with_extensions_dir(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` for a child run by this interpreter: ``set_extensions_dir``'s."""
    env = dict(environ)
    set_extensions_dir(env)
    return env
