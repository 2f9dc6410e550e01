"""DeepSpeed's op cache is per Python environment: two installs sharing a user's cache never
rebuild each other's op, and every process of one environment (tests included) shares one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.doctor import deepspeed_ops
from engine.extension_cache import (
    EXTENSIONS_ENV,
    environment_extensions_dir,
    set_extensions_dir,
    with_extensions_dir,
)


@pytest.fixture()
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(EXTENSIONS_ENV, raising=False)
    return tmp_path


def test_each_environment_and_torch_version_has_its_own_cache(cache_home: Path) -> None:
    old, new = Path("/home/u/old/.venv"), Path("/home/u/clone/.venv")
    a = environment_extensions_dir(str(old), "2.13.0+cpu")
    assert a.parent == cache_home / "memtui" / "torch_extensions"  # memtui's user cache
    assert a.name.endswith("-torch2.13.0+cpu")
    assert environment_extensions_dir(str(new), "2.13.0+cpu") != a
    assert environment_extensions_dir(str(old), "2.14.0+cpu") != a
    assert environment_extensions_dir(str(old), "2.13.0+cpu") == a  # stable: found again


def test_the_default_is_this_interpreter_s_environment(cache_home: Path) -> None:
    import importlib.metadata

    here = environment_extensions_dir(sys.prefix, importlib.metadata.version("torch"))
    assert environment_extensions_dir() == here


def test_a_home_of_its_own_shares_the_environment_s_cache(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests give every run a MEMTUI_HOME of its own: the op cache does not follow it, so
    the suite builds the op once, not once per test."""
    monkeypatch.setenv("MEMTUI_HOME", str(tmp_path / "one"))
    one = environment_extensions_dir()
    monkeypatch.setenv("MEMTUI_HOME", str(tmp_path / "two"))
    assert environment_extensions_dir() == one


def test_a_cache_the_user_set_is_kept(cache_home: Path) -> None:
    assert with_extensions_dir({EXTENSIONS_ENV: "/mine"})[EXTENSIONS_ENV] == "/mine"
    assert with_extensions_dir({EXTENSIONS_ENV: ""})[EXTENSIONS_ENV] == str(environment_extensions_dir())
    environ: dict[str, str] = {}
    assert set_extensions_dir(environ) == str(environment_extensions_dir()) == environ[EXTENSIONS_ENV]


def test_the_doctor_s_op_check_uses_the_trainers_cache(cache_home: Path) -> None:
    assert deepspeed_ops._child_env()[EXTENSIONS_ENV] == str(environment_extensions_dir())
