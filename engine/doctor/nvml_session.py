"""NVML kept open for a long-lived process (the supervisor's hardware watch).

The probes bracket each reading with ``init``/``shutdown`` (right for the one-shot
``memtui doctor``). Every 10 s in the supervisor that loads and unloads the driver's state
each time (milliseconds, and NVML's handles are invalidated each time): an ``NvmlSession``
turns ``init`` into "initialise once" and ``shutdown`` into nothing, until ``close``.
A failed initialisation is remembered and raised again (a host without a driver does not
gain one while the supervisor runs).
"""

from __future__ import annotations

import threading
from typing import Any

from engine.doctor.nvml_probe import NvmlLibrary


class NvmlSession:
    """``library`` initialised once, on first ``init``; really shut down by ``close``."""

    def __init__(self, library: NvmlLibrary) -> None:
        self._library = library
        self._lock = threading.Lock()  # the readings run in worker threads
        self._open = False
        self._failed: BaseException | None = None

    def init(self) -> None:
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if self._open:
                return
            try:
                self._library.init()
            except Exception as err:
                self._failed = err
                raise
            self._open = True

    def shutdown(self) -> None:
        """Nothing: the session stays open for the next reading (see ``close``)."""

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                self._library.shutdown()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._library, name)  # every reading call, as the library has it
