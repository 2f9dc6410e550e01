"""Which directive values add risk and which reduce it, judged against the values in effect.

While the environment or the numerics are unhealthy the policy lets through only remedies:
directives that move no field up. A higher learning-rate multiplier, a looser clip, a
higher loss-scale power or a larger micro-batch (more memory) adds risk; the same fields
moved down (or left where they are) do not. A field whose value in effect is unknown
counts as adding risk (zero trust). Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.domain import DirectiveField, DirectiveValue


def added_risk(
    values: Mapping[DirectiveField, DirectiveValue], current: Mapping[DirectiveField, DirectiveValue]
) -> list[str]:
    """One reason per field in ``values`` that adds risk; empty: a remedy."""
    out = []
    for name, value in values.items():
        now = current.get(name)
        if now is None:
            out.append(f"{name} {value:g} adds risk: its value in effect is not known")
        elif value > now:
            out.append(f"{name} {value:g} above the {now:g} in effect adds risk")
    return out


def remedy_note(
    values: Mapping[DirectiveField, DirectiveValue], current: Mapping[DirectiveField, DirectiveValue]
) -> str:
    """Why a remedy was let through, e.g. ``lr_multiplier 0.5 (from 1)``."""
    return ", ".join(f"{name} {value:g} (from {current[name]:g})" for name, value in values.items())
