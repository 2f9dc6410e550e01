"""The cores training leaves to the supervisor's own work: one per borrower, told to the
trainer as their count whenever it changes, never twice for the same borrower."""

from __future__ import annotations

from typing import Any

from engine.supervisor.channel.trainer_link import TrainerSeat
from engine.supervisor.trainers.core_loans import CoreLoans
from engine.wire.protocol import CoreShare


class Seat(TrainerSeat):
    """A seat whose trainer keeps what it was sent (None: no trainer connected)."""

    def __init__(self, connected: bool = True) -> None:
        super().__init__()
        self.connected = connected
        self.sent: list[Any] = []

    def send(self, message: Any) -> bool:
        if self.connected:
            self.sent.append(message)
        return self.connected


def test_each_borrower_takes_one_core_and_the_trainer_hears_the_count() -> None:
    seat = Seat()
    loans = CoreLoans(seat)
    spare, survey = loans.lender("spare"), loans.lender("op survey")
    spare(1)
    survey(1)
    spare(1)  # asked again while it holds its core: nothing new to tell
    spare(0)
    survey(0)
    survey(0)
    assert seat.sent == [CoreShare(cores=1), CoreShare(cores=2), CoreShare(cores=1), CoreShare(cores=0)]


def test_no_trainer_connected_is_no_error_and_the_count_is_kept() -> None:
    seat = Seat(connected=False)
    loans = CoreLoans(seat)
    loans.lend("op survey")
    seat.connected = True
    loans.lend("spare")
    assert loans.borrowers == {"op survey", "spare"} and seat.sent == [CoreShare(cores=2)]
