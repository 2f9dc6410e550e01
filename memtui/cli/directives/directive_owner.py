"""Which run a directive id belongs to, when the command names no run.

Directive ids are the supervisor's (``d-`` and 10 hex digits), unique in practice across
runs, so ``memtui approve ID`` needs no run: every run's store under the home is asked
whether it holds that id (its verdict rows, indexed, then its directive events: a verdict
is stored in batches, an event at once), newest run first. None holding it, or more than
one, is an error that says so. Torch-free; imports stay lazy.
"""

from __future__ import annotations

from pathlib import Path

from engine.run.directory import RunDir, list_runs, runs_root
from memtui.cli.errors import CliError

DIRECTIVE_EVENTS = ("directive_proposed", "directive_decided", "directive_applied")


def holds_directive(run: RunDir, directive_id: str) -> bool:
    """True when ``run``'s store has a verdict or an event on ``directive_id``."""
    import sqlite3

    from engine.run.storage.store import Store

    if not Path(run.store).exists():
        return False
    try:
        with Store(run.store, readonly=True) as store:
            if store.decisions(0, 1, directive_id):
                return True
            marks = ", ".join("?" * len(DIRECTIVE_EVENTS))
            rows = store.query(
                f"SELECT 1 FROM events WHERE type IN ({marks})"
                " AND json_extract(data, '$.directive.id') = ? LIMIT 1",
                (*DIRECTIVE_EVENTS, directive_id),
            )
            return bool(rows)
    except (OSError, sqlite3.Error, ValueError):
        return False  # a store that cannot be read holds nothing we could act on


def owner_of(directive_id: str, home: Path | None = None) -> RunDir:
    """The one run whose store holds ``directive_id``; a CliError when none or several do."""
    owners = [run for run in list_runs(home) if holds_directive(run, directive_id)]
    if len(owners) == 1:
        return owners[0]
    if not owners:
        raise CliError(f"no run in {runs_root(home)} has a directive {directive_id!r}")
    names = ", ".join(run.run_id for run in owners)
    raise CliError(f"directive {directive_id!r} is in {len(owners)} runs ({names}): name the run", code=2)
