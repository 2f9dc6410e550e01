"""The configuration's reference: every key of ``RunConfig``, its default, its bounds and its
docstring, as the Markdown tables of docs/configuration.md.

The models are the one source; the page holds what this prints between its
``<!-- config-reference -->`` markers, and a test keeps the two equal. After changing a key:
``python -m engine.config.reference --write docs/configuration.md``. Torch-free.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from engine.config.run_config import RunConfig
from engine.doc_markers import Markers, generated_section_main, table_cell

MARKERS = Markers("config-reference")
BEGIN, END = MARKERS.begin, MARKERS.end
INTRO = (
    "Every key, generated from the config's models (`python -m engine.config.reference`). "
    "A default is the model's own: `preset` sets `[model]` and `[train]` first "
    "(`PRESETS` in `engine/config/run_config.py`), and keys you write win over both."
)


RETIRED_INTRO = (
    "**Retired keys.** Tuning constants that were keys once: a config or an older run's "
    "`run.json` that still names one loads, and the key is ignored; the fixed value in its "
    "place is a module constant with its unit and reason."
)


@dataclass(frozen=True)
class ConfigKey:
    """One key of the run's config."""

    name: str  # dotted, e.g. ``train.micro_batch``
    default: str  # as it would be written in TOML; "unset" for None
    allowed: str  # the type in a TOML reader's words, with its bounds or choices
    meaning: str  # the field's docstring, on one line


def config_keys(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[ConfigKey]:
    """Every leaf key under ``model``, in declaration order (sections expanded in place)."""
    docs = field_docstrings(model)
    keys: list[ConfigKey] = []
    for name, field in model.model_fields.items():
        section = _section_model(field.annotation)
        if section is not None:
            keys += config_keys(section, f"{prefix}{name}.")
            continue
        keys.append(ConfigKey(prefix + name, _default(field), _allowed(field), docs.get(name, "")))
    return keys


def retired_keys(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, what stands in its place) for every key a section once had and reads
    no more (``StrictSection.retired``), in declaration order."""
    found = [(prefix + name, instead) for name, instead in getattr(model, "retired", {}).items()]
    for name, field in model.model_fields.items():
        section = _section_model(field.annotation)
        if section is not None:
            found += retired_keys(section, f"{prefix}{name}.")
    return found


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the string literal under its declaration, in ``model`` or a base."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls is BaseModel or not issubclass(cls, BaseModel):
            continue
        (body,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
        assert isinstance(body, ast.ClassDef)
        for declared, after in zip(body.body, body.body[1:], strict=False):
            if isinstance(declared, ast.AnnAssign) and isinstance(declared.target, ast.Name):
                literal = after.value if isinstance(after, ast.Expr) else None
                if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                    docs[declared.target.id] = " ".join(inspect.cleandoc(literal.value).split())
    return docs


def _section_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in get_args(annotation) or (annotation,):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


BOUNDS = (
    (annotated_types.Ge, ">=", "ge"),
    (annotated_types.Gt, ">", "gt"),
    (annotated_types.Le, "<=", "le"),
    (annotated_types.Lt, "<", "lt"),
)
"""A bound constraint, how the reference writes it, and the attribute that holds it."""

NAMES = {int: "integer", float: "number", str: "string", bool: "true or false", Any: "anything"}


def _allowed(field: FieldInfo) -> str:
    return _with_bounds(_type_text(field.annotation), field.metadata)


def _type_text(annotation: Any) -> str:
    """A TOML reader's words for a type: ``integer >= 0 or "auto"``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin is Annotated:
        return _with_bounds(_type_text(args[0]), [c for info in args[1:] for c in _constraints(info)])
    if origin is dict:
        return "table"
    if origin is list:
        return f"list of {_type_text(args[0])}s" if args else "list"
    if args:  # a union: None is "unset", which the default column shows
        return " or ".join(_type_text(a) for a in args if a is not type(None))
    return NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _constraints(info: Any) -> list[Any]:
    return list(info.metadata) if isinstance(info, FieldInfo) else [info]


def _with_bounds(text: str, constraints: list[Any]) -> str:
    bounds = [
        f"{sign} {getattr(constraint, attribute)}"
        for constraint in constraints
        for kind, sign, attribute in BOUNDS
        if isinstance(constraint, kind)
    ]
    return f"{text} {', '.join(bounds)}" if bounds else text


def reference_markdown() -> str:
    """The tables, one per section (top-level keys first), between the page's markers."""
    sections: dict[str, list[ConfigKey]] = {}
    for key in config_keys():
        section, _, _ = key.name.rpartition(".")
        sections.setdefault(section, []).append(key)
    parts = [BEGIN, INTRO]
    for section, keys in sections.items():
        parts.append(f"**`[{section}]`**" if section else "**Top level**")
        rows = ["| key | default | type | meaning |", "|---|---|---|---|"]
        rows += [f"| `{k.name}` | `{k.default}` | {k.allowed} | {table_cell(k.meaning)} |" for k in keys]
        parts.append("\n".join(rows))
    parts.append(RETIRED_INTRO)
    rows = ["| key | in its place |", "|---|---|"]
    rows += [f"| `{name}` | {table_cell(_coded(instead))} |" for name, instead in retired_keys()]
    parts.append("\n".join(rows))
    parts.append(END)
    return "\n\n".join(parts) + "\n"


def _coded(text: str) -> str:
    """Dotted module names and keys in ``text`` as code."""
    return re.sub(r"\b((?:engine|memory)\.[\w.]+[A-Za-z_])", r"`\1`", text)


def written_reference(page: Path) -> str:
    """What ``page`` holds between the markers, the markers included; "" without them."""
    return MARKERS.written(page)


def main(argv: list[str] | None = None) -> int:
    return generated_section_main(
        MARKERS, reference_markdown, "python -m engine.config.reference", __doc__, argv
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
