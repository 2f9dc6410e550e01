"""A run's view from its stored history: the data layer's plain records folded into a ``RunView``.

Opens the console before (or without) a live connection: a finished run is shown read-only
from its history, a live one shows its past at once and then replays only newer events.
"""

from __future__ import annotations

import dataclasses

from engine.run.directory import RunDir
from memtui.console.run_view import DEFAULT_THRESHOLDS, MAX_EVENTS, RunView
from memtui.console.series import MAX_EVALS
from memtui.history import RunIdentity, read_identity, read_stored_run

SAMPLES_FOLDED = 200
"""Newest stored steps folded into the view (enough for the smoothed loss)."""


def identity_view(identity: RunIdentity) -> RunView:
    """Identity, target and thresholds; no numbers yet."""
    return RunView(
        run_id=identity.run_id,
        name=identity.name,
        target_steps=identity.target_steps,
        started_at=identity.started_at,
        thresholds=identity.thresholds or DEFAULT_THRESHOLDS,
    )


def initial_view(run: RunDir) -> RunView:
    """What ``run.json`` says, before anything is read from the store."""
    return identity_view(read_identity(run))


def stored_view(run: RunDir) -> RunView:
    """The initial view plus the stored state, newest steps and newest events."""
    stored = read_stored_run(run, steps=SAMPLES_FOLDED, events=MAX_EVENTS)
    view = dataclasses.replace(identity_view(stored.identity), connection="history")
    for sample in stored.samples:
        view = view.with_sample(sample)
    for event in stored.events:
        view = view.with_event(event)
    evals = stored.evals[-MAX_EVALS:] or view.evals  # older ones too than the newest events
    return dataclasses.replace(view, newest_data_at=stored.newest_data_at, state=stored.state, evals=evals)
