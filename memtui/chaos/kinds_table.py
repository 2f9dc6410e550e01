"""The table of chaos kinds in docs/chaos-and-endurance.md, made from the kinds themselves:
each kind's name, its parameters with their defaults as ``memtui chaos`` takes them, what it
does (its ``description``) and when the run counts as recovered (its ``recovered_when``).
A new kind appears in the table by existing; a test keeps the page equal to this.
``python -m memtui.chaos.kinds_table --write docs/chaos-and-endurance.md`` after a change.
"""

from __future__ import annotations

from engine.chaos.table import KINDS, ChaosParamSpec, chaos_specs
from engine.doc_markers import Markers, generated_section_main, table_cell
from memtui.chaos.chaos_values import format_value

MARKERS = Markers("chaos-kinds")


def kinds_markdown() -> str:
    """The table, one row per kind in menu order, between the page's markers."""
    rows = ["| Kind | Parameters (defaults) | What happens | Recovered when |", "|---|---|---|---|"]
    for spec in chaos_specs():
        params = " ".join(_option(p) for p in spec.params)
        cells = [f"`{params}`" if params else "", spec.description, KINDS[spec.kind].recovered_when]
        rows.append(f"| `{spec.kind}` | " + " | ".join(map(table_cell, cells)) + " |")
    return "\n".join([MARKERS.begin, *rows, MARKERS.end]) + "\n"


def _option(param: ChaosParamSpec) -> str:
    """``--delay-s 0``; a choice shows every choice, its default first: ``--phase forward|backward``."""
    flag = "--" + param.name.replace("_", "-")
    if param.choices:
        default = str(param.default)
        return f"{flag} {'|'.join([default, *(c for c in param.choices if c != default)])}"
    return f"{flag} {format_value(param, param.default)}"


def main(argv: list[str] | None = None) -> int:
    return generated_section_main(
        MARKERS, kinds_markdown, "python -m memtui.chaos.kinds_table", __doc__, argv
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
