"""The cores the running trainer is asked to leave to the supervisor's own CPU work: a spare
trainer warming up, the DeepSpeed op survey's child. Each imports torch and DeepSpeed, seconds
of a core, and on a CPU host torch's intra-op threads wait for each other at every op, so
one such process beside training stretched ``tiny``'s steps from tens of milliseconds to
about a second on 2 cores, at any priority (``engine.trainer.core_share``). One core per
borrower while it works; the trainer is told their count (``CoreShare``) whenever it
changes, and keeps at least one thread whatever it is told. Torch-free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from engine.supervisor.channel.trainer_link import TrainerSeat
from engine.wire.protocol import CoreShare

log = logging.getLogger(__name__)


class CoreLoans:
    """Who borrows a core from training now, and telling the trainer how many."""

    def __init__(self, seat: TrainerSeat) -> None:
        self.seat = seat
        self.borrowers: set[str] = set()

    def lender(self, borrower: str) -> Callable[[int], None]:
        """``share(cores)`` for one borrower: any number above 0 while it works (it gets one
        core), 0 once it is done."""

        def share(cores: int) -> None:
            if cores > 0:
                self.lend(borrower)
            else:
                self.give_back(borrower)

        return share

    def lend(self, borrower: str) -> None:
        if borrower not in self.borrowers:
            self.borrowers.add(borrower)
            self._tell()

    def give_back(self, borrower: str) -> None:
        if borrower in self.borrowers:
            self.borrowers.discard(borrower)
            self._tell()

    def _tell(self) -> None:
        cores = len(self.borrowers)
        if not self.seat.send(CoreShare(cores=cores)):
            log.debug("no trainer connected to leave %d cores", cores)
