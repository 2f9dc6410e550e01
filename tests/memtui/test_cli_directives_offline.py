"""``memtui directives`` on a run with no live supervisor: a directive its store still has
waiting (its supervisor was killed before it could expire it) is listed as expired."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.events import DirectiveDecided, DirectiveProposed
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import DirectiveView
from memtui.cli.main import main


def view(directive_id: str, state: str) -> DirectiveView:
    return DirectiveView(id=directive_id, source="rules", created_at=0.0, state=state, reasons=["why"])


def test_waiting_directives_of_a_run_without_a_supervisor_are_listed_expired(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir.create(build_run_config(name="killed", steps=100), home)
    with Store(run.store) as store:  # as a supervisor killed with SIGKILL left it
        for directive_id, state in (("d-1", "pending"), ("d-2", "approved"), ("d-3", "applied")):
            payload = DirectiveProposed(directive=view(directive_id, "pending"))
            store.append_event(payload.event_type, data=payload.data())
            if state != "pending":
                decided = DirectiveDecided(directive=view(directive_id, state))
                store.append_event(decided.event_type, data=decided.data())
        store.update_meta(state="running", attempt=1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["directives", run.run_id, "--json"]) == 0
    listed = {d["id"]: d for d in json.loads(out.getvalue())}
    assert {k: d["state"] for k, d in listed.items()} == {
        "d-1": "expired",
        "d-2": "expired",
        "d-3": "applied",
    }
    assert listed["d-1"]["reasons"] == [
        "why",
        "expired: its run has no live supervisor (nothing can decide or apply it)",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["directives", run.run_id, "--pending", "--json"]) == 0
    assert json.loads(out.getvalue()) == []
