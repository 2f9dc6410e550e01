"""Failure injections the operator asks for (``Chaos`` requests), done by the supervisor.

Each is recorded (a ``chaos_injected`` event with its chaos id, stored before anything
happens) and then done. Only ``kill`` is performed so far: SIGKILL of the running trainer's
process group, which the restart policy then treats like any other unasked death; the
other kinds are refused as not available. Torch-free.
"""

from __future__ import annotations

import uuid

from engine.chaos_kinds import ChaosKindSpec, chaos_specs
from engine.events import ChaosInjected
from engine.protocol import Chaos, Error, Ok
from engine.supervisor.attempts import Attempts
from engine.supervisor.journal import Journal

PERFORMED = ("kill",)
"""The kinds this supervisor carries out: advertised to consoles in ``Welcome``."""


def advertised() -> list[ChaosKindSpec]:
    return chaos_specs(PERFORMED)


def inject(message: Chaos, attempts: Attempts, journal: Journal) -> Ok | Error:
    """Record and do ``message``'s injection; an Error if it is unknown or cannot be done now."""
    kind = message.request.kind
    if kind not in PERFORMED:
        return Error(id=message.id, reason=f"chaos {kind!r} is not available yet")
    pid = attempts.pid
    if pid is None:
        return Error(id=message.id, reason="no trainer is running to kill")
    chaos_id = f"c-{uuid.uuid4().hex[:8]}"
    injected = ChaosInjected(chaos_id=chaos_id, kind=kind, params={}, pid=pid)
    journal.record(injected, f"chaos: kill (SIGKILL pid {pid})", attempt=attempts.attempt)
    attempts.kill()
    return Ok(id=message.id, result={"chaos_id": chaos_id, "kind": kind, "pid": pid})
