"""A run's status from the live supervisor when one serves it, else from disk."""

from __future__ import annotations

from typing import Any

from engine.domain import RunStatus
from engine.run.directory import RunDir

STATUS_TIMEOUT_S = 3.0


def fetch_status(run: RunDir, timeout: float = STATUS_TIMEOUT_S, strict: bool = False) -> RunStatus:
    """Ask the supervisor (``Status``); if it is gone or does not answer, read the store
    (``strict``: a store that cannot be read is a StoreError, not a state)."""
    if run.supervisor_pid() is not None and run.socket.exists():
        status = _ask_supervisor(run, timeout)
        if status is not None:
            return status
    from engine.checkpoints.standing import standing_of
    from engine.run.reports.status import offline_status

    return offline_status(run, **standing_of(run.checkpoints).status_fields(), strict=strict)


def _ask_supervisor(run: RunDir, timeout: float) -> RunStatus | None:
    from pydantic import ValidationError

    from engine.wire.protocol import Status
    from memtui.client import EngineRefused, EngineUnavailable, new_request_id, request_once

    try:
        ok = request_once(run.socket, Status(id=new_request_id()), timeout=timeout)
        return status_from_result(ok.result)
    except (EngineUnavailable, EngineRefused, OSError, ValidationError):
        return None


def status_from_result(result: dict[str, Any]) -> RunStatus:
    """The RunStatus in an ``Ok`` answer to ``Status`` (bare, or under ``"status"``)."""
    body = result.get("status") if isinstance(result.get("status"), dict) else result
    return RunStatus.model_validate(body)
