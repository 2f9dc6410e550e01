"""A user's DeepSpeed JSON, as users already write it, read into ``[train]``.

memtui owns the batch geometry, precision, ZeRO stage and clipping (``OWNED_DEEPSPEED_KEYS``):
it changes them during a run (adaptive memory, directives), so one source must hold them.
A user's DeepSpeed config that sets them is adopted rather than refused: each value goes into
``[train]`` when the file agrees with itself and with the ``[train]`` keys the user wrote,
and is then taken out of the passed-through dict. A disagreement is one line naming both
values. ``"auto"`` (the Hugging Face Trainer's convention) means "not set here".

The batch arithmetic is DeepSpeed's: ``train_batch_size = micro x grad_accum x world_size``,
any two of the three giving the third (world size: ``train.ranks x train.nodes``).
"""

from __future__ import annotations

import copy
from typing import Any

AUTO = "auto"

# deepspeed key (dotted) -> [train] key, for the keys adopted one to one.
_DIRECT = {
    "zero_optimization.stage": "zero_stage",
    "gradient_clipping": "grad_clip",
    "fp16.initial_scale_power": "initial_scale_power",
}
_BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
_OWNED = (*_DIRECT, *_BATCH, "fp16.enabled", "bf16.enabled")


class DeepSpeedConflict(ValueError):
    """The DeepSpeed config disagrees with itself or with ``[train]``: one line, both values."""


def adopt_deepspeed_keys(
    user: dict[str, Any], merged: dict[str, Any], world: int | None = None
) -> dict[str, Any]:
    """``merged`` (preset + user's table) with the owned keys of its ``deepspeed_config``
    moved into ``train``. ``user`` is the table the user wrote: its ``train`` keys are the
    ones a DeepSpeed value may not contradict (a preset's default may be replaced).
    ``world``: the data-parallel ranks the batch keys divide over, when not ``train.ranks x
    train.nodes`` (a plan for other hardware than the config's)."""
    ds = merged.get("deepspeed_config")
    if not isinstance(ds, dict):
        return merged
    given = user.get("train")
    written: dict[str, Any] = given if isinstance(given, dict) else {}
    train = dict(merged.get("train") or {})
    found: dict[str, tuple[str, Any]] = {}  # train key -> (deepspeed key, value)
    for dotted, key in _DIRECT.items():
        value = _get(ds, dotted)
        if value is not None:
            found[key] = (dotted, value)
    precision = _precision(ds)
    if precision is not None:
        found["precision"] = (f"{precision[0]} (precision)", precision[1])
    found.update(_batch(ds, train, world))
    for key, (dotted, value) in found.items():
        if key in written and written[key] != value:
            raise DeepSpeedConflict(
                f"deepspeed_config.{dotted} = {_show(value)} "
                f"conflicts with train.{key} = {_show(written[key])}"
            )
        train[key] = value
    return {**merged, "train": train, "deepspeed_config": _without_owned(ds)}


def _get(ds: dict[str, Any], dotted: str) -> Any:
    """The value at ``a.b``; None when absent or ``"auto"``."""
    node: Any = ds
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return None if node == AUTO else node


def _precision(ds: dict[str, Any]) -> tuple[str, str] | None:
    """(deepspeed key, precision) from ``fp16.enabled`` / ``bf16.enabled``."""
    fp16, bf16 = _get(ds, "fp16.enabled"), _get(ds, "bf16.enabled")
    if fp16 is True and bf16 is True:
        raise DeepSpeedConflict("deepspeed_config.fp16.enabled = true conflicts with bf16.enabled = true")
    if fp16 is True:
        return ("fp16.enabled", "fp16")
    if bf16 is True:
        return ("bf16.enabled", "bf16")
    if fp16 is False and bf16 in (False, None):
        return ("fp16.enabled", "fp32")  # fp16 turned off, bf16 not on: full precision
    return None


def _batch(ds: dict[str, Any], train: dict[str, Any], world: int | None = None) -> dict[str, tuple[str, Any]]:
    """global_batch and micro_batch from any of DeepSpeed's three batch keys (any two give
    the third; ``gradient_accumulation_steps`` alone keeps the run's micro-batch)."""
    total, micro, accum = (_get(ds, k) for k in _BATCH)
    for name, value in zip(_BATCH, (total, micro, accum), strict=True):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise DeepSpeedConflict(
                f"deepspeed_config.{name}: must be a positive integer (got {_show(value)})"
            )
    world = world or int(train.get("ranks", 1)) * int(train.get("nodes", 1))
    found: dict[str, tuple[str, Any]] = {}
    implied = f"(implied by gradient_accumulation_steps {accum})"
    if accum is not None:
        if micro is None:
            micro = _divide(total, accum * world) if total is not None else int(train.get("micro_batch", 1))
            found["micro_batch"] = (f"train_micro_batch_size_per_gpu {implied}", micro)
        if total is None:
            total = micro * accum * world
            found["global_batch"] = (f"train_batch_size {implied}", total)
        if total != micro * accum * world:
            product = micro * accum * world
            raise DeepSpeedConflict(
                f"deepspeed_config.train_batch_size = {total} conflicts with train_micro_batch_size_per_gpu "
                f"{micro} x gradient_accumulation_steps {accum} x train.ranks {world} = {product}"
            )
    elif total is not None and micro is not None and total % (micro * world):
        raise DeepSpeedConflict(
            f"deepspeed_config.train_batch_size = {total} is not a multiple of "
            f"train_micro_batch_size_per_gpu {micro} x train.ranks {world}"
        )
    found.setdefault("global_batch", ("train_batch_size", total))
    found.setdefault("micro_batch", ("train_micro_batch_size_per_gpu", micro))
    return {key: pair for key, pair in found.items() if pair[1] is not None}


def _divide(total: int, per_micro: int) -> int:
    """The micro-batch that ``train_batch_size`` and ``gradient_accumulation_steps`` imply."""
    if total % per_micro:
        raise DeepSpeedConflict(
            f"deepspeed_config.train_batch_size = {total} is not a multiple of "
            f"gradient_accumulation_steps x train.ranks ({per_micro})"
        )
    return total // per_micro


def _without_owned(ds: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``ds`` without the owned keys (and without sections they leave empty)."""
    out = copy.deepcopy(ds)
    for dotted in _OWNED:
        *parents, leaf = dotted.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    for section in ("fp16", "bf16", "zero_optimization"):
        if out.get(section) == {}:
            del out[section]
    return out


def _show(value: Any) -> str:
    """JSON-ish spelling: true/false, numbers, strings as they are."""
    return str(value).lower() if isinstance(value, bool) else str(value)
