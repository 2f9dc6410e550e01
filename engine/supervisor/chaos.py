"""Failure injections the operator asks for (``Chaos`` requests), done by the supervisor.

Each is recorded (a ``chaos`` event, stored before anything happens) and then done. Only
``kill_trainer`` is available: SIGKILL of the running trainer's process group, which the
restart policy then treats like any other unasked death. Torch-free.
"""

from __future__ import annotations

from engine.events import ChaosInjected
from engine.protocol import Chaos, Error, Ok
from engine.supervisor.attempts import Attempts
from engine.supervisor.journal import Journal


def inject(message: Chaos, attempts: Attempts, journal: Journal) -> Ok | Error:
    """Record and do ``message``'s injection; an Error if it is unknown or cannot be done now."""
    if message.action != "kill_trainer":
        return Error(id=message.id, reason=f"chaos {message.action!r} is not available yet")
    pid = attempts.pid
    if pid is None:
        return Error(id=message.id, reason="no trainer is running to kill")
    journal.record(
        ChaosInjected(action=message.action, params=message.params, pid=pid),
        f"chaos: kill_trainer (SIGKILL pid {pid})",
        attempt=attempts.attempt,
    )
    attempts.kill()
    return Ok(id=message.id, result={"action": message.action, "pid": pid})
