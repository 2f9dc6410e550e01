"""The table of chaos kinds is the one place a kind is named: each kind in it has its model
(parameters with bounds and help), its words, a recovery signal and a performer; the
supervisor advertises, the schedule accepts and ``memtui chaos --list`` shows exactly its
kinds; and no other module of the engine or memtui switches on a kind's name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.chaos.config import ChaosConfig
from engine.chaos.kind import ChaosKind, Pending
from engine.chaos.table import KINDS, chaos_specs, parse_request, values_of
from engine.supervisor.chaos.desk import advertised
from engine.supervisor.chaos.performer import TO_THE_TRAINER, performers
from memtui.chaos.chaos_phrases import depends_on_the_run, what_happens
from memtui.run_facts import RunFacts

ROOT = Path(__file__).resolve().parents[2]
SIGNALS = ("step_shows", "event_shows", "applied_shows", "settled")
KIND_HOMES = (
    "engine/chaos/kinds/",
    "engine/supervisor/chaos/performers/",
    "engine/trainer/chaos/performers/",
)
"""Where a kind may be named: its contract and its performer."""
NOT_CHAOS = {
    ("engine/trainer/memory/adaptive_memory.py", "oom"): "a memory adaptation's kind",
    ("engine/trainer/memory/adaptation_events.py", "oom"): "a memory adaptation's kind",
    ("engine/memory/controller.py", "oom"): "a memory adaptation's kind",
    ("engine/supervisor/intake/trainer_reports.py", "oom"): "a memory adaptation's kind",
    ("engine/run/oom_files.py", "oom"): "a directory's name",
    ("engine/run/reports/endurance_report.py", "kill"): "an old store's ``kill_trainer`` chaos, read as kill",
    ("engine/run/reports/endurance_report.py", "oom"): "a memory adaptation's kind",
    ("engine/directives/failed_sizes.py", "oom"): "a memory adaptation's kind",
    ("engine/directives/planners/external.py", "overflow"): "a telemetry field",
    ("memtui/run_series.py", "oom"): "a memory adaptation's mark",
    ("memtui/cli/inspection/oom_command.py", "oom"): "the oom command",
    ("memtui/report_page.py", "oom"): "a memory adaptation's colour",
    ("memtui/console/series.py", "overflow"): "a telemetry field",
    ("memtui/console/widgets/memory_breakdown.py", "ballast"): "a part of the memory shown",
    ("memtui/console/app.py", "kill"): "the key that asks for a kill",
}
"""(module, name) pairs where a kind's name means something else, with the reason."""


def overrides(model: type[ChaosKind], method: str) -> bool:
    return getattr(model, method).__func__ is not getattr(ChaosKind, method).__func__


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_has_its_model_words_recovery_and_performer(kind: str) -> None:
    model = KINDS[kind]
    spec = chaos_specs([kind])[0]
    assert (spec.kind, spec.title, spec.performer) == (kind, model.title, model.performer)
    assert model.title and model.description and all(p.help for p in spec.params)
    defaults = values_of(parse_request(kind, {}))
    assert overrides(model, "phrase") and what_happens(kind, defaults) == model.phrase(defaults)
    if depends_on_the_run(kind):
        facts = RunFacts(verified_steps=(20, 10), on_disk=2, on_preemption=True, max_restarts=3)
        assert model.outcome(defaults, facts)
    assert model.decided_by_the_performer or any(overrides(model, m) for m in SIGNALS)
    performer = performers()[kind]
    assert (performer is TO_THE_TRAINER) == (model.performer == "trainer")


def test_the_supervisor_advertises_and_the_schedule_accepts_exactly_the_tables_kinds() -> None:
    assert [s.kind for s in advertised()] == list(KINDS) == [s.kind for s in chaos_specs()]
    assert set(ChaosConfig(kinds=dict.fromkeys(KINDS, 1.0)).kinds) == set(KINDS)
    with pytest.raises(ValidationError, match="kinds.explode: not a chaos kind"):
        ChaosConfig(kinds={"explode": 1.0})


def test_a_kind_without_its_own_signal_waits_for_nothing() -> None:
    pending = Pending("c-1", "x", {}, 0.0, 1)
    assert ChaosKind.applied_shows(pending, 3) is None and ChaosKind.settled(pending, "completed") is None


def test_no_module_outside_a_kinds_home_names_a_kind() -> None:
    names = "|".join(sorted(KINDS, key=len, reverse=True))
    literal = re.compile(rf"""["']({names})["']""")
    found = []
    for path in sorted([*ROOT.glob("engine/**/*.py"), *ROOT.glob("memtui/**/*.py")]):
        module = path.relative_to(ROOT).as_posix()
        if module.startswith(KIND_HOMES):
            continue
        for match in literal.finditer(path.read_text()):
            if (module, match.group(1)) not in NOT_CHAOS:
                found.append(f"{module}: {match.group(0)}")
    assert found == []
