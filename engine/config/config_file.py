"""Reading a run's configuration: a TOML file, a DeepSpeed JSON and ``--set`` overrides.

Everything is validated here, once, into a ``RunConfig``; a wrong key or value is a
``ConfigError`` that names it, before anything starts. Torch-free.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.config.deepspeed_adoption import DeepSpeedConflict, adopt_deepspeed_keys
from engine.config.override import OverrideError, parse_override
from engine.config.run_config import PRESETS, RunConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(ValueError):
    """A config that cannot run; the message names every offending key."""


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A new dict: ``over``'s values win; nested dicts merge key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def describe_validation(err: ValidationError, source: Path | None = None) -> str:
    """One line naming every offending key of a RunConfig validation, ``a.b: why (got x)``;
    an unknown key with the known one nearest to it; a key written in ``source`` (the TOML
    file) prefixed with the file's path and the key's line."""
    text = Path(source).read_text(encoding="utf-8", errors="replace") if source is not None else ""
    lines = []
    for e in err.errors():
        where = _shortened(".".join(str(p) for p in e["loc"])) or "(config)"
        line = key_line(text, tuple(str(p) for p in e["loc"])) if text else None
        where = f"{source}:{line}: {where}" if line is not None else where
        if e["type"] == "extra_forbidden":
            near = difflib.get_close_matches(str(e["loc"][-1]), known_keys(e["loc"][:-1]), n=1)
            lines.append(f"{where}: unknown key" + (f" (did you mean {near[0]}?)" if near else ""))
        else:
            lines.append(f"{where}: {e['msg']} (got {_shortened(repr(e.get('input')))})")
    return "; ".join(lines)


def _shortened(text: str, most: int = 80) -> str:
    """``text`` cut to ``most`` characters for one line of an error: a hostile key or value of
    megabytes is named, not echoed."""
    return text if len(text) <= most else text[: most - 1] + "…"


def key_line(text: str, key: tuple[str, ...]) -> int | None:
    """The line (from 1) of TOML ``text`` that writes ``key`` (``("train", "micro_batch")``:
    ``micro_batch = ...`` under ``[train]``, or ``train.micro_batch = ...``; a one-part key
    that is a table: its ``[header]``); None where it is not written plainly."""
    table: tuple[str, ...] = ()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and not line.startswith("[["):
            table = tuple(p.strip().strip('"') for p in line.strip("[]").split("."))
            if table == key:
                return number
        elif "=" in line:
            name = tuple(p.strip().strip('"') for p in line.split("=", 1)[0].split("."))
            if (*table, *name) == key:
                return number
    return None


def known_keys(section: tuple[int | str, ...]) -> list[str]:
    """The keys RunConfig takes in ``section`` (``()``: the top level; ``("train",)``: the
    ``[train]`` table); none where the section is not a table of RunConfig's own."""
    model: Any = RunConfig
    for part in section:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        model = field.annotation if field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
    return list(model.model_fields)


def build_run_config(
    raw: dict[str, Any] | None = None,
    source: Path | None = None,
    *,
    world: int | None = None,
    **overrides: Any,
) -> RunConfig:
    """Validate ``raw`` (a parsed TOML document) on top of its preset.

    ``overrides`` are top-level keys from the command line (``steps``, ``name``, ``preset``),
    applied last; ``None`` values are ignored. ``world``: the ranks a DeepSpeed config's batch
    keys are resolved for, when not the config's own (``memtui plan --gpus``).
    """
    raw = dict(raw or {})
    raw.update({k: v for k, v in overrides.items() if v is not None})
    preset = raw.get("preset", "tiny")
    if preset not in PRESETS:
        raise ConfigError(f"preset: unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    if raw.get("workload") and not raw.get("workload_dir"):
        raw["workload_dir"] = os.getcwd()  # the trainer runs elsewhere: remember where we were
    try:
        merged = adopt_deepspeed_keys(raw, deep_merge(PRESETS[preset], raw), world)
    except DeepSpeedConflict as err:
        raise ConfigError(str(err)) from None
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(describe_validation(err, source)) from None


DEMO: dict[str, Any] = {
    "preset": "tiny",
    "policy": {"planner": "rules", "approval": "manual", "max_staleness_steps": 2000},
}
"""What bare ``memtui`` starts when no run is live: ``tiny`` with the rule planner's
suggestions waiting for the operator, so the approval workflow shows from the first minutes.
A suggestion stays open for the demo's whole run (``tiny``'s 2,000 steps): at the default
500 steps it went stale 13-17 s after it was made on a 2-core CPU (two demo runs), before
a newcomer had read it."""


def demo_run_config() -> RunConfig:
    return build_run_config(DEMO)


def load_run_config(
    path: Path | None = None, settings: list[str] | None = None, *, world: int | None = None, **overrides: Any
) -> RunConfig:
    """Read a TOML config (optional) plus command-line overrides into a RunConfig.

    A ``deepspeed_config = "file.json"`` string is read relative to the TOML file.
    ``settings``: ``--set KEY=VALUE`` texts (engine.config.override), applied over the file.
    """
    raw = _read_toml(path) if path is not None else {}
    for text in settings or []:
        try:
            raw = deep_merge(raw, parse_override(text))
        except OverrideError as err:
            raise ConfigError(str(err)) from None
    return build_run_config(raw, source=path, world=world, **overrides)


CONFIG_MAX_BYTES = 1 << 20
"""A config file (TOML, or the DeepSpeed JSON it names) is read up to 1 MiB: a real one is a
few KB, and ``memtui run /dev/zero`` must not read for ever."""


def _read_bounded(path: Path) -> str:
    """The text of a regular file of at most CONFIG_MAX_BYTES, or a ConfigError saying why not."""
    # O_NONBLOCK: opening a FIFO with no writer would wait for one; a regular file ignores it
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ConfigError(f"{path}: not a regular file")
        data = file.read(CONFIG_MAX_BYTES + 1)
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(f"{path}: over {CONFIG_MAX_BYTES >> 20} MiB, too large for a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None


def _read_toml(path: Path) -> dict[str, Any]:
    """The file's table, with its relative paths resolved against the file's directory."""
    try:
        raw = tomllib.loads(_read_bounded(Path(path)))
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    here = Path(path).resolve().parent
    if raw.get("workload") and not raw.get("workload_dir"):
        raw["workload_dir"] = str(here)
    elif isinstance(raw.get("workload_dir"), str):
        raw["workload_dir"] = str(here / raw["workload_dir"])
    hf = raw.get("hf")
    if isinstance(hf, dict):  # the model and the data, relative to the config file
        for key in ("model_dir", "data"):
            if isinstance(hf.get(key), str):
                hf[key] = str(here / Path(hf[key]).expanduser())
    ds = raw.get("deepspeed_config")
    if isinstance(ds, str):
        raw["deepspeed_config"] = _read_json(Path(path).parent / ds)
    return raw


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(_read_bounded(path))
    except ConfigError as err:
        raise ConfigError(f"deepspeed_config: {err}") from None
    except OSError as err:
        raise ConfigError(f"deepspeed_config: {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"deepspeed_config: {path}: not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"deepspeed_config: {path}: must hold a JSON object")
    return value
