"""The report's directive counts: the policy's verdicts on proposals, the operator's answers
(rejections included) and the trainer's applies, each directive once; a restart's re-send
is no apply. Stores written before the operator column still count sensibly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner_samples import sample

from engine.config.config_file import build_run_config
from engine.directives.queue import DirectiveQueue
from engine.domain import DecisionRecord, Event, Severity
from engine.events import DirectiveApplied, Payload
from engine.run.directory import RunDir
from engine.run.reports.directive_tally import DirectiveTally, directive_tally
from engine.run.reports.endurance_report import endurance_report
from engine.run.storage.store import Store
from engine.wire.protocol import ApplyDirective
from memtui.endurance_markdown import figure_rows


class StoreRecorder:
    """The journal's part for these tests: every event into the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __call__(self, payload: Payload, message: str = "", *, severity: Severity | None = None) -> Event:
        data = payload.data()
        return self.store.append_event(payload.event_type, severity=severity or payload.severity, data=data)


def send_to(sent: list[ApplyDirective]) -> Any:
    def send(message: Any) -> bool:
        sent.append(message)
        return True

    return send


def echo(queue: DirectiveQueue, sent: list[ApplyDirective], step: int) -> None:
    """The trainer applies everything sent at the boundary after ``step`` and echoes it."""
    for m in sent:
        applied = dict(m.values)
        queue.on_applied(
            DirectiveApplied(
                directive_id=m.directive_id,
                decision_id=m.decision_id,
                step=step,
                applied=applied,
                resend=m.resend,
            )
        )
    sent.clear()


def test_counts_by_who_decided_and_one_apply_per_directive_across_a_restart(home: Path) -> None:
    config = build_run_config(name="tally", steps=100)
    run = RunDir.create(config, home)
    sent: list[ApplyDirective] = []
    with Store(run.store) as store:
        queue = DirectiveQueue(config, StoreRecorder(store), send_to(sent), keep=store.add_decision)
        queue.latest = sample(step=5)
        approved = queue.propose_raw({"lr_multiplier": 0.5}, "rules")
        queue.approve(approved.directive.id)
        edited = queue.propose_raw({"gradient_clip_norm": 1.0}, "rules")
        queue.clamp(edited.directive.id, {"gradient_clip_norm": 0.5})
        refused = queue.propose_raw({"lr_multiplier": 0.4}, "rules")
        queue.reject(refused.directive.id, "not now")
        cut = queue.propose_raw({"lr_multiplier": 2.0}, "rules")  # the policy clamps it to 0.85
        queue.approve(cut.directive.id)
        queue.propose_raw({"loss_scale_initial_power": 9}, "rules", refusal="malformed reply")
        echo(queue, sent, 6)
        queue.trainer_connected()  # a restarted trainer: the values in effect again
        assert sent and all(m.resend for m in sent)
        echo(queue, sent, 7)
        store.flush()
        tally = directive_tally(store)
        assert tally == DirectiveTally(
            proposed=5,
            allowed=3,
            clamped=1,
            rejected=1,
            operator_approved=2,
            operator_clamped=1,
            operator_rejected=1,
            applied=3,
        )
        report = endurance_report(run, store)
    rows = dict(figure_rows(report))
    assert rows["directives proposed / allowed / clamped / rejected by the policy"] == "5 / 3 / 1 / 1"
    assert rows["directives approved / clamped / rejected by the operator"] == "2 / 1 / 1"
    assert rows["directives applied (a restart's re-send is none)"] == "3"


def old_row(i: int, directive_id: str, verdict: Any, state: str, reasons: list[str]) -> DecisionRecord:
    return DecisionRecord(
        ts=0.0,
        decision_id=f"d{i}",
        directive_id=directive_id,
        source="rules",
        verdict=verdict,
        state=state,
        reasons=reasons,
    )


def test_rows_and_events_from_before_the_operator_column_and_resend(home: Path) -> None:
    run = RunDir.create(build_run_config(name="old", steps=100), home)
    with Store(run.store) as store:
        rows = [
            old_row(0, "a", "allow", "pending", []),
            old_row(1, "a", "clamp", "approved", ["values set by the operator"]),  # a plain approval
            old_row(2, "b", "allow", "pending", []),
            old_row(3, "b", "allow", "rejected", ["rejected by the operator: no"]),
            old_row(4, "c", "reject", "rejected", ["stale"]),
        ]
        for row in rows:
            store.add_decision(row)
        for _ in range(2):  # applied, then re-sent under its id after a restart (as main did)
            store.append_event(
                "directive_applied", data={"directive_id": "a", "applied": {"lr_multiplier": 0.5}}
            )
        store.flush()
        store._db.execute("ALTER TABLE decisions DROP COLUMN operator")  # as an older memtui made it
    with Store(run.store, readonly=True) as store:
        assert [d.operator for _, d in store.decisions()] == [None] * 5
        tally = directive_tally(store)
    assert tally == DirectiveTally(
        proposed=3, allowed=2, rejected=1, operator_approved=1, operator_rejected=1, applied=1
    )
    with Store(run.store) as store:  # a newer memtui writing to it adds the column
        store.add_decision(
            old_row(5, "c", "reject", "rejected", []).model_copy(update={"operator": "reject"})
        )
        assert [d.operator for _, d in store.decisions()] == [None] * 5 + ["reject"]
