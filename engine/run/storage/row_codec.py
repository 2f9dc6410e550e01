"""How the store's rows are made from the run's models and read back into them.

* Step samples: one column per ``TelemetrySample`` field, typed from the field's annotation
  (``STEP_COLUMNS``), so a new field gets a column. A float that is not finite (a NaN or
  inf loss) is stored as NULL in its own column, so SQL over the store (``AVG(loss)``)
  skips it rather than counting it, and named in the row's ``nonfinite`` column (JSON
  text, ``{"loss": "nan"}``), from which it is read back as it was. Stores written before
  kept the text ``'NaN'`` in the column: still read as ``float('nan')`` (and moved to
  ``nonfinite`` by ``store_file``'s migration). A list of models (``ranks``) and a mapping
  (the workload's ``metrics``) are JSON text.
* Policy verdicts (``DecisionRecord``): one column per field, reasons, patch and bounds as
  JSON text.

Pure: no I/O. Torch-free.
"""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel

from engine.domain import DecisionRecord, TelemetrySample

NONFINITE_COLUMN = "nonfinite"
"""Steps column: JSON text naming the row's non-finite float fields and their value
(``nan``, ``inf``, ``-inf``); NULL when every float was finite."""


# ------------------------------------------------------------------------- steps


def _sql_type(annotation: Any) -> str:
    """SQLite column type for a TelemetrySample field annotation."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _sql_type(args[0]) if len(args) == 1 else "TEXT"
    if origin is Literal or annotation is str:
        return "TEXT"
    if annotation in (int, bool):
        return "INTEGER"
    if annotation is float:
        return "REAL"
    return "TEXT"


def _step_columns() -> dict[str, str]:
    return {name: _sql_type(f.annotation) for name, f in TelemetrySample.model_fields.items()}


STEP_COLUMNS: dict[str, str] = _step_columns()
"""Field name -> SQLite type; derived from the model so a new field gets a column."""
_INSERTED = [*STEP_COLUMNS, NONFINITE_COLUMN]
STEP_INSERT = f"INSERT INTO steps ({', '.join(_INSERTED)}) VALUES ({', '.join('?' * len(_INSERTED))})"

_JSON_COLUMNS = frozenset({"ranks", "metrics"})
"""TelemetrySample fields that hold a list of models or a mapping: stored as JSON text."""

# Optional fields whose NULL means None (not "missing"); other NULLs are left to defaults.
_NULLABLE = frozenset(
    name for name, f in TelemetrySample.model_fields.items() if not f.is_required() and f.default is None
)


def readable_step_columns(have: set[str]) -> list[str]:
    """The columns of a steps table holding ``have`` that ``sample_from`` reads, in order."""
    return [name for name in _INSERTED if name in have]


def _encode_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # named in NONFINITE_COLUMN
    if isinstance(value, list):
        return json.dumps([v.model_dump() if isinstance(v, BaseModel) else v for v in value])
    if isinstance(value, dict):
        return json.dumps(value)  # metrics: finite floats by name (the screen kept only those)
    return value


def _decode_value(column_type: str, value: Any) -> Any:
    if column_type == "REAL" and isinstance(value, str):
        return float(value)  # 'NaN' (and any other text a float column was given)
    return value  # INTEGER 0/1 validates back into bool fields


def step_row(sample: TelemetrySample) -> list[Any]:
    """The values of ``STEP_INSERT`` for one sample."""
    values = [getattr(sample, name) for name in STEP_COLUMNS]
    nonfinite = {
        name: str(v)
        for name, v in zip(STEP_COLUMNS, values, strict=True)
        if isinstance(v, float) and not math.isfinite(v)
    }
    return [*(_encode_value(v) for v in values), json.dumps(nonfinite) if nonfinite else None]


def sample_from(columns: list[str], row: tuple[Any, ...]) -> TelemetrySample:
    """A sample from a row of ``columns`` (``readable_step_columns`` of the file: an older
    one may lack a few)."""
    pairs = dict(zip(columns, row, strict=False))
    nonfinite = pairs.pop(NONFINITE_COLUMN, None)
    values = {n: _decode_value(STEP_COLUMNS[n], v) for n, v in pairs.items()}
    values.update({n: float(v) for n, v in json.loads(nonfinite or "{}").items() if n in STEP_COLUMNS})
    for name in _JSON_COLUMNS.intersection(values):
        if isinstance(values[name], str):
            values[name] = json.loads(values[name])
    kept = {k: v for k, v in values.items() if v is not None or k in _NULLABLE}
    return TelemetrySample.model_validate(kept)


# --------------------------------------------------------------------- decisions

DECISION_COLUMNS = (
    "ts",
    "decision_id",
    "directive_id",
    "source",
    "verdict",
    "state",
    "reasons",
    "patch",
    "bounds",
    "policy_revision",
    "rate_limited",
    "operator",
)
_DECISION_JSON = frozenset({"reasons", "patch", "bounds"})
DECISION_INSERT = (
    f"INSERT INTO decisions ({', '.join(DECISION_COLUMNS)}) VALUES ({', '.join('?' * len(DECISION_COLUMNS))})"
)


def decision_row(decision: DecisionRecord) -> list[Any]:
    """The values of ``DECISION_INSERT`` for one verdict."""
    values = decision.model_dump(mode="json")
    return [json.dumps(values[c]) if c in _DECISION_JSON else values[c] for c in DECISION_COLUMNS]


def decision_from(row: tuple[Any, ...]) -> DecisionRecord:
    """A verdict from a row of ``DECISION_COLUMNS``."""
    pairs = zip(DECISION_COLUMNS, row, strict=True)
    values = {c: json.loads(v) if c in _DECISION_JSON else v for c, v in pairs}
    return DecisionRecord.model_validate(values)
