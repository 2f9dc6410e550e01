"""Numbers as an operator reads them: bytes, durations, rates, ages.

Pure functions of their inputs; every one accepts ``None`` (not known yet) and renders it
as ``PLACEHOLDER`` so panels never special-case missing data.
"""

from __future__ import annotations

import math

from engine.measures.byte_size import PLACEHOLDER as PLACEHOLDER
from engine.measures.byte_size import format_bytes as format_bytes

_SI_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def format_duration(seconds: float | None) -> str:
    """Compact, two most significant units: ``0.042 -> "42ms"``, ``3725 -> "1h02m"``."""
    if seconds is None or not math.isfinite(seconds):
        return PLACEHOLDER
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 1:
        return f"{sign}{s * 1000:.0f}ms"
    if s < 60:
        return f"{sign}{s:.1f}s" if s < 10 else f"{sign}{s:.0f}s"
    whole = int(s)
    days, rem = divmod(whole, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{sign}{days}d{hours:02d}h"
    if hours:
        return f"{sign}{hours}h{minutes:02d}m"
    return f"{sign}{minutes}m{secs:02d}s"


def format_age(seconds: float | None) -> str:
    """How long ago: ``format_age(3) -> "3.0s ago"``, under a second ``"just now"``, ``None -> "never"``."""
    if seconds is None or not math.isfinite(seconds):
        return "never"
    if seconds < 1:
        return "just now"
    return f"{format_duration(seconds)} ago"


def format_count(n: float | None) -> str:
    """SI-abbreviated count: ``12_345 -> "12.3k"``, ``999 -> "999"``."""
    if n is None:
        return PLACEHOLDER
    if not math.isfinite(n):
        return str(n)
    for scale, suffix in _SI_SUFFIXES:
        if abs(n) >= scale:
            value = n / scale
            digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
            return f"{value:.{digits}f}{suffix}"
    return f"{n:.0f}" if float(n).is_integer() else f"{n:.1f}"


def format_rate(per_second: float | None, unit: str = "tok") -> str:
    """A rate with an SI-abbreviated count: ``12_345.0 -> "12.3k tok/s"``."""
    if per_second is None:
        return PLACEHOLDER
    return f"{format_count(per_second)} {unit}/s"


def format_float(x: float | None, digits: int = 4) -> str:
    """Significant digits, scientific only when tiny or huge; NaN/inf shown as they are."""
    if x is None:
        return PLACEHOLDER
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        return f"{x:.{max(digits - 1, 0)}e}"
    return f"{x:.{digits}g}"


LOSS_FIXED_FROM, LOSS_FIXED_BELOW = 0.01, 10_000.0
"""Losses in this range show with three decimals."""


def format_loss(loss: float | None) -> str:
    """Three decimals in the usual range (``3.000``, not ``3``: raw and smoothed line up and
    a change in the third decimal shows); significant digits outside it."""
    if loss is None or not math.isfinite(loss) or not LOSS_FIXED_FROM <= abs(loss) < LOSS_FIXED_BELOW:
        return format_float(loss)
    return f"{loss:.3f}"


def format_percent(fraction: float | None) -> str:
    """``0.4567 -> "45.7%"``."""
    if fraction is None or not math.isfinite(fraction):
        return PLACEHOLDER
    return f"{fraction * 100:.1f}%"


def format_scale(scale: float | None) -> str:
    """A loss scale as a power of two when it is one: ``4096 -> "4096 (2^12)"``."""
    if scale is None:
        return PLACEHOLDER
    if scale > 0 and math.isfinite(scale):
        power = math.log2(scale)
        if power.is_integer():
            return f"{scale:.0f} (2^{int(power)})"
    return format_float(scale)
