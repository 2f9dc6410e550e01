"""A workload's own scalars (accuracy, perplexity, a domain figure): their limits and the
screen every one passes before it is reported, stored or shown. Torch-free.

A value is kept when its name is a short identifier and the value a finite number; the
first ``MAX_METRICS`` names seen are kept and later new names dropped. Each dropped name
is warned about once (per reason) through the ``warn`` callable, never raised: a user's
metric never ends a run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from numbers import Real

MAX_METRICS = 16
"""Distinct names a run may report (per step and per eval together)."""
MAX_NAME_CHARS = 40
"""Longest name kept, in characters (a panel row and a CSV header stay readable)."""
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
"""Names as TensorBoard and Prometheus labels take them: a letter or _ first."""


class MetricScreen:
    """Keeps what may be reported of each mapping of named values; warns once per drop."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._names: list[str] = []
        """Accepted names in the order first seen (at most MAX_METRICS)."""
        self._warned: set[tuple[str, str]] = set()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._names)

    def screen(self, raw: Mapping[object, object]) -> dict[str, float]:
        """The finite numeric values of ``raw`` under accepted names, as floats."""
        kept: dict[str, float] = {}
        for name, value in raw.items():
            reason = self._refusal(name, value)
            if reason is not None:
                self._drop(str(name)[:80], reason)
                continue
            assert isinstance(name, str)
            kept[name] = float(value)  # type: ignore[arg-type]  # _refusal checked it is Real
        return kept

    def _refusal(self, name: object, value: object) -> str | None:
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not NAME_PATTERN.match(name):
            return f"the name is not an identifier of at most {MAX_NAME_CHARS} characters"
        if isinstance(value, bool) or not isinstance(value, Real):
            return f"the value is {type(value).__name__}, not a number"
        if not math.isfinite(float(value)):
            return f"the value is {float(value)} (not finite)"
        if name not in self._names:
            if len(self._names) >= MAX_METRICS:
                return f"more than {MAX_METRICS} metric names"
            self._names.append(name)
        return None

    def _drop(self, name: str, reason: str) -> None:
        if (name, reason) in self._warned:
            return
        self._warned.add((name, reason))
        self._warn(f"workload metric {name!r} dropped: {reason} (warned once)")
