"""How a follower node's trainer ended, told to its own supervisor through a file.

With several nodes only rank 0 (on node 0) talks to a supervisor. The supervisor of every
other node launches its torchrun and sees only an exit status: 0 both when the run reached
its target and when it stopped at node 0's request. So the local leader (``LOCAL_RANK`` 0)
of such a node writes ``RUN_DIR/node-outcome.json`` on a clean end: ``{"attempt": N,
"outcome": "completed" | "stopped"}``; the supervisor reads it for that attempt (a file left
by an earlier attempt does not count). Torch-free.
"""

from __future__ import annotations

import json
import os

from engine.run.directory import RunDir
from engine.run.durable_file import replace_atomically

OUTCOME_FILE = "node-outcome.json"


def follower_leader(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """This process is the first rank on a node other than node 0 (torchrun's variables)."""
    return environ.get("LOCAL_RANK") == "0" and environ.get("RANK", "0") != "0"


def write_node_outcome(run: RunDir, attempt: int, outcome: str) -> None:
    doc = {"attempt": attempt, "outcome": outcome}
    replace_atomically(run.path / OUTCOME_FILE, (json.dumps(doc) + "\n").encode("utf-8"))


def read_node_outcome(run: RunDir, attempt: int) -> str | None:
    """``completed`` or ``stopped`` for ``attempt``; None when not written for it."""
    try:
        doc = json.loads((run.path / OUTCOME_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("attempt") != attempt:
        return None
    outcome = doc.get("outcome")
    return outcome if outcome in ("completed", "stopped") else None
