"""What kill, preempt and corrupt_checkpoint will do to one run, from its facts (pure)."""

from __future__ import annotations

import pytest

from memtui.chaos.chaos_phrases import what_happens
from memtui.run_facts import RunFacts

RUN = RunFacts(verified_steps=(), on_disk=0, on_preemption=False, max_restarts=5)


@pytest.mark.parametrize(
    ("kind", "facts", "words"),
    [
        ("kill", RUN, "restarts it from step 0 (no verified checkpoint yet)"),
        ("kill", RunFacts((500, 250), 2, False, 5), "restarts it from step 500, the newest verified"),
        (
            "kill",
            RunFacts((), 1, False, 5),
            "none of its 1 checkpoints verifies: the restarted trainer refuses",
        ),
        ("kill", RunFacts((500,), 1, False, 0), "restarts are off (restart.max_restarts = 0): the run ends"),
        ("preempt", RUN, "this run ends there (restart.on_preemption is false"),
        ("preempt", RunFacts((), 0, True, 5), "the supervisor restarts it from that checkpoint"),
        ("corrupt_checkpoint", RunFacts((500,), 1, False, 5), "(step 500), the only one that verifies"),
        ("corrupt_checkpoint", RunFacts((500, 250), 2, False, 5), "loads step 250, the one before"),
        ("corrupt_checkpoint", RUN, "there is no verified one, so the supervisor refuses"),
    ],
)
def test_the_words_follow_the_runs_facts(kind: str, facts: RunFacts, words: str) -> None:
    assert words in what_happens(kind, {}, facts)
