"""``memtui doctor RUN``: what the doctor finds in one run's directory, beside the machine.

Three things decide whether a run can go on: its store (SQLite's ``quick_check``: a store
that cannot be read is a run whose history is lost, though not its checkpoints), its
checkpoints (each committed tag's quick verification: manifest and file sizes; the newest
that verifies is where a resume starts) and whether a supervisor serves it. Each is one
finding; a damaged store is ``unhealthy``, a rejected checkpoint ``degraded``. Reads only:
nothing of the run is written. Torch-free.
"""

from __future__ import annotations

import sqlite3

from engine.checkpoints import catalog
from engine.hardware_report import Finding
from engine.run.directory import RunDir
from engine.run.storage.store import Store, StoreError


def run_findings(run: RunDir) -> list[Finding]:
    """The store's, the checkpoints' and the supervisor's findings for ``run``."""
    return [store_finding(run), *checkpoint_findings(run), supervisor_finding(run)]


def store_finding(run: RunDir) -> Finding:
    if not run.store.exists():
        return Finding(level="info", message=f"{run.run_id}: no store yet (the run has not started)")
    try:
        with Store(run.store, readonly=True) as store:
            damage = store.damage()
            steps = store.count_steps() if damage is None else 0
    except (StoreError, sqlite3.Error) as err:
        return Finding(level="unhealthy", message=str(err))
    if damage is not None:
        return Finding(
            level="unhealthy",
            message=f"{run.run_id}: its store is damaged (quick_check: {damage}); its checkpoints "
            f"are files of their own: `memtui checkpoints {run.run_id}` lists those that verify",
        )
    return Finding(level="info", message=f"{run.run_id}: store ok (quick_check), {steps} steps stored")


def checkpoint_findings(run: RunDir) -> list[Finding]:
    """One finding for the tags that verify (quick check), one for those that do not."""
    verdicts = list(catalog.verdicts_newest_first(run.checkpoints, "quick"))
    good = [v for v in verdicts if v.ok]
    findings = []
    if good:
        newest = good[0]
        findings.append(
            Finding(
                level="info",
                message=f"{run.run_id}: {len(good)} checkpoint(s) verify (quick check); a resume "
                f"starts from {newest.tag} (step {newest.step})",
            )
        )
    elif not verdicts:
        findings.append(Finding(level="info", message=f"{run.run_id}: no checkpoint committed yet"))
    bad = [f"{v.tag}: {v.problem}" for v in verdicts if not v.ok]
    if bad:
        findings.append(
            Finding(
                level="degraded",
                message=f"{run.run_id}: {len(bad)} checkpoint(s) do not verify: {'; '.join(bad)}",
            )
        )
    return findings


def supervisor_finding(run: RunDir) -> Finding:
    pid = run.supervisor_pid()
    served = f"served by supervisor pid {pid}" if pid is not None else "no supervisor serves it"
    return Finding(level="info", message=f"{run.run_id}: {served}")
