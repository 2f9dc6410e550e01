"""A run's endurance figures read from its store for the console: the run-wide tokens/s
(every attempt, read on incrementally) and the whole endurance report.

Blocking, read-only SQLite reads: call them off the event loop. None where the store is not
there yet or cannot be read (a supervisor creating it, a damaged file). Torch-free.
"""

from __future__ import annotations

import sqlite3
import threading

from engine.domain import ThroughputFigures
from engine.run.directory import RunDir
from engine.run.reports.endurance_report import EnduranceReport, endurance_report
from engine.run.reports.throughput import ThroughputTally
from engine.run.storage.store import Store, StoreError


class EnduranceReader:
    """Reads one run's figures; keeps the throughput sums between two reads (one thread at a time)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self._tally = ThroughputTally()
        self._lock = threading.Lock()  # two worker threads never update the sums at once

    def throughput(self) -> ThroughputFigures | None:
        """Run-wide and current-attempt tokens/s, reading only the steps stored since last time."""
        try:
            with self._lock, Store(self.run.store, readonly=True) as store:
                return self._tally.update(store).figures()
        except (StoreError, sqlite3.Error):
            return None

    def report(self) -> EnduranceReport | None:
        """The endurance report as of now (``memtui report``'s)."""
        try:
            with Store(self.run.store, readonly=True) as store:
                return endurance_report(self.run, store)
        except (StoreError, sqlite3.Error):
            return None
