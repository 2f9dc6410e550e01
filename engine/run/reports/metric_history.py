"""The workload's own metrics as the store holds them (``steps.metrics``, JSON text): every
name a run reported, and each name's newest value. SQL over the file (``json_each``), so
an export or a report reads the names without decoding every sample first. A store
written before the column existed has none. Torch-free.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from engine.run.storage.store import Store

METRIC_COLUMN = "metrics"
"""The steps column (``TelemetrySample.metrics``) holding a step's ``{name: value}``."""


def metric_names(store: Store) -> list[str]:
    """Every metric name any stored step reported, sorted."""
    rows = _query(store, f"SELECT DISTINCT j.key FROM steps s, json_each(s.{METRIC_COLUMN}) j ORDER BY j.key")
    return [str(name) for (name,) in rows]


def last_metrics(store: Store) -> dict[str, float]:
    """Each name's value on the newest step that reported it, by name."""
    # SQLite: with MAX() the bare columns come from the row holding the maximum.
    rows = _query(
        store,
        f"SELECT j.key, j.value, MAX(s.id) FROM steps s, json_each(s.{METRIC_COLUMN}) j"
        " GROUP BY j.key ORDER BY j.key",
    )
    return {str(name): float(value) for name, value, _ in rows}


def _query(store: Store, sql: str) -> list[tuple[Any, ...]]:
    try:
        return store.query(sql)
    except sqlite3.OperationalError as err:
        if "no such column" in str(err):
            return []  # a store from before workload metrics
        raise
