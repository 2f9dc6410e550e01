"""The ZeRO-Offload a run's ``deepspeed_config`` asks for, read once: the plan
(``memtui plan CONFIG``), the trainer's memory prior and the planned memory all take it from
here, so none of them plans "no offload" for a run that offloads.

Torch-free and pure. The keys (DeepSpeed 0.19's ``zero_optimization``):

- ``offload_optimizer.device``: ``cpu`` or ``nvme`` moves the optimizer states (and, in
  DeepSpeed's accounting, the fp32 gradients) off the device; ``none`` keeps them;
- ``offload_param.device``: ``cpu`` or ``nvme`` moves the 16-bit parameters too (ZeRO-3
  only; DeepSpeed refuses it at lower stages);
- the deprecated booleans ``cpu_offload`` (= ``offload_optimizer`` on the cpu) and
  ``cpu_offload_param`` (= ``offload_param`` on the cpu), which DeepSpeed still honours.

The memory model counts offload at ZeRO-2 and -3 (where DeepSpeed's estimators count it);
an offload asked for at ZeRO-0 or -1 is named as not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.run_config import RunConfig
from engine.memory.model import Offload

DEVICES = ("none", "cpu", "nvme")
"""DeepSpeed's ``OffloadDeviceEnum``."""


class OffloadError(ValueError):
    """An offload key with a value DeepSpeed would refuse; the message names the key."""


@dataclass(frozen=True)
class OffloadSetting:
    """What the config's ``zero_optimization`` offloads, and from which key."""

    offload: Offload
    """What the memory model counts: ``none``, ``optimizer`` or ``all`` (parameters too)."""
    optimizer_device: str = "none"
    """``none``, ``cpu`` or ``nvme``."""
    param_device: str = "none"
    keys: tuple[str, ...] = ()
    """The keys that set it, as ``deepspeed_config.zero_optimization.KEY = VALUE``."""
    note: str | None = None
    """Why something the config asks for is not counted (its stage)."""


def offload_setting(config: RunConfig) -> OffloadSetting:
    """The run's offload, from ``config.deepspeed_config`` at ``config.train.zero_stage``."""
    return read_offload(config.deepspeed_config, config.train.zero_stage)


def read_offload(deepspeed_config: Mapping[str, Any] | None, zero_stage: int) -> OffloadSetting:
    zero = (deepspeed_config or {}).get("zero_optimization")
    if not isinstance(zero, Mapping):
        return OffloadSetting("none")
    optimizer, optimizer_key = _device(zero, "offload_optimizer", "cpu_offload")
    param, param_key = _device(zero, "offload_param", "cpu_offload_param")
    keys = tuple(key for key in (optimizer_key, param_key) if key)
    if not keys:
        return OffloadSetting("none")
    offload: Offload = "none"
    note = None
    if zero_stage < 2:
        note = f"{' and '.join(keys)}: not counted at ZeRO-{zero_stage} (offload is counted at ZeRO-2 and -3)"
    elif param != "none" and zero_stage == 3:
        offload = "all"
    elif optimizer != "none":
        offload = "optimizer"
    if param != "none" and zero_stage == 2:
        note = f"{param_key}: parameter offload needs ZeRO-3; at ZeRO-2 only the optimizer's is counted"
    return OffloadSetting(offload, optimizer, param, keys, note)


def _device(zero: Mapping[str, Any], section: str, deprecated: str) -> tuple[str, str | None]:
    """(device, the key that says it) for ``section`` or its deprecated boolean."""
    where = f"deepspeed_config.zero_optimization.{section}"
    block = zero.get(section)
    if block is not None:
        if not isinstance(block, Mapping):
            raise OffloadError(f"{where}: must be a table with a device (got {block!r})")
        device = block.get("device", "none")
        if device not in DEVICES:
            raise OffloadError(f"{where}.device: one of {', '.join(DEVICES)} (got {device!r})")
        return str(device), (f"{where}.device = {device}" if device != "none" else None)
    flag = zero.get(deprecated)
    if flag is None:
        return "none", None
    if not isinstance(flag, bool):
        raise OffloadError(f"deepspeed_config.zero_optimization.{deprecated}: true or false (got {flag!r})")
    return ("cpu", f"deepspeed_config.zero_optimization.{deprecated} = true") if flag else ("none", None)
