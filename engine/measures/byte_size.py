"""Bytes as an operator reads them, for every side that writes words (the console's panels,
the chaos kinds' phrases): binary units, ``None`` as a placeholder. Pure."""

from __future__ import annotations

import math

PLACEHOLDER = "—"
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float | None) -> str:
    """Binary units: ``1536 -> "1.5 KiB"``, ``3 * 2**30 -> "3.00 GiB"``."""
    if n is None:
        return PLACEHOLDER
    if not math.isfinite(n):
        return str(n)
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    unit = 0
    while value >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{sign}{int(value)} B"
    digits = 2 if value < 10 else 1 if value < 100 else 0
    return f"{sign}{value:.{digits}f} {_BYTE_UNITS[unit]}"
