"""A directive changes only what it names, from proposal to the trainer's echo, across
trainer restarts; the audit trail stores the policy's and the operator's decisions as what
they were; an operator can return a field to its run default in one directive; growth
into a micro-batch that ran out of memory lately is neither suggested nor allowed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_samples import sample

from engine.config.config_file import build_run_config
from engine.config.directive_defaults import run_defaults
from engine.config.run_config import RunConfig
from engine.directives.directive import DirectiveRefused
from engine.directives.failed_sizes import stored_ooms
from engine.directives.operator_request import answer_request
from engine.directives.planners.factory import RulePlanning
from engine.directives.queue import DirectiveError, DirectiveQueue
from engine.domain import DIRECTIVE_FIELDS, ONE_SHOT_FIELDS, DecisionRecord
from engine.events import DirectiveApplied, MemoryAdapted
from engine.run.storage.store import Store
from engine.wire.protocol import ApplyDirective, Propose
from tests.fakes.event_log import EventLog


class Trainer:
    """A simulated trainer: applies what it is sent at the next boundary and echoes it, and
    keeps a loss-scale power that only an apply (or its own scaler) moves."""

    def __init__(self) -> None:
        self.inbox: list[ApplyDirective] = []
        self.power = 6  # the scaler's state, as a checkpoint restores it (2**6 = 64)

    def echoes(self, step: int) -> list[DirectiveApplied]:
        out = []
        for message in self.inbox:
            assert not (message.resend and "loss_scale_initial_power" in message.values)
            if "loss_scale_initial_power" in message.values:
                self.power = int(message.values["loss_scale_initial_power"])
            out.append(
                DirectiveApplied(
                    directive_id=message.directive_id,
                    decision_id=message.decision_id,
                    step=step,
                    applied=dict(message.values),
                    resend=message.resend,
                )
            )
        self.inbox.clear()
        return out


class Run:
    """A queue, its event log and decision rows, a clock, and a trainer that can restart."""

    def __init__(self, config: RunConfig) -> None:
        self.now, self.step = 1_000_000.0, 5
        self.log = EventLog()
        self.kept: list[DecisionRecord] = []
        self.trainer = Trainer()
        self.sent: list[ApplyDirective] = []
        self.queue = DirectiveQueue(config, self.log, self.send, lambda: self.now, self.kept.append)
        self.queue.latest = sample(step=self.step, loss_scale=64.0)

    def send(self, message: Any) -> bool:
        self.sent.append(message)
        self.trainer.inbox.append(message)
        return True

    def boundary(self) -> None:
        self.step += 1
        for echo in self.trainer.echoes(self.step):
            self.queue.on_applied(echo)
        self.queue.on_step(sample(step=self.step, loss_scale=float(2**self.trainer.power)))

    def restart(self) -> None:
        """SIGKILL and a new trainer from the checkpoint: the inbox is lost, the scaler's
        state is what the checkpoint restored."""
        self.trainer.inbox.clear()
        self.queue.trainer_connected()

    def applied(self) -> list[dict[str, Any]]:
        return self.log.data_of("directive_applied")


def config(**policy: Any) -> RunConfig:
    return build_run_config(
        {
            "train": {"precision": "fp16", "initial_scale_power": 12},
            "policy": {"rate_limit": 10_000, **policy},
        }
    )


def test_an_lr_only_directive_after_a_clamped_power_changes_only_the_lr_even_after_a_restart() -> None:
    run = Run(config())
    power = run.queue.propose_raw({"loss_scale_initial_power": 9}, "rules")
    run.queue.approve(power.directive.id)
    run.boundary()
    assert run.trainer.power == 9
    run.trainer.power = 6  # the scaler backed off on overflows: 2**6 = 64 is the state now
    lr = run.queue.propose_raw({"lr_multiplier": 0.7}, "rules")
    assert lr.view().allowed == {"lr_multiplier": 0.7}
    run.queue.approve(lr.directive.id)
    run.boundary()
    run.restart()
    run.boundary()
    view = run.queue.entries[lr.directive.id].view()
    assert view.requested == view.allowed == {"lr_multiplier": 0.7}
    assert run.trainer.power == 6  # the restart did not put 2**9 back over the scaler's state
    resent = [m for m in run.sent if m.resend]
    assert resent and all(not ONE_SHOT_FIELDS & set(m.values) for m in resent)
    per_directive = [e["directive_id"] for e in run.applied()]
    assert sorted(per_directive) == sorted([power.directive.id, lr.directive.id])  # one apply each
    assert run.applied()[-1]["applied"] == {"lr_multiplier": 0.7}


def test_an_approval_is_stored_as_the_policy_allowing_and_the_operator_approving() -> None:
    run = Run(config())
    asked = run.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    run.queue.approve(asked.directive.id)
    proposal, approval = [d for d in run.kept if d.directive_id == asked.directive.id]
    assert (proposal.verdict, proposal.operator, proposal.state) == ("allow", None, "pending")
    assert (approval.verdict, approval.operator, approval.state) == ("allow", "approve", "approved")
    cut = run.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    run.queue.clamp(cut.directive.id, {"lr_multiplier": 0.3})
    assert (run.kept[-1].verdict, run.kept[-1].operator, run.kept[-1].state) == ("allow", "clamp", "clamped")
    no = run.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    run.queue.reject(no.directive.id, "not now")
    assert (run.kept[-1].verdict, run.kept[-1].operator, run.kept[-1].state) == (
        "allow",
        "reject",
        "rejected",
    )
    over = run.queue.propose_raw({"lr_multiplier": 2.0}, "rules")  # the policy clamps it to 0.85
    assert (run.kept[-1].verdict, run.kept[-1].operator) == ("clamp", None)
    assert over.view().allowed == {"lr_multiplier": 0.85}


def test_a_clamp_may_edit_only_the_directives_own_fields() -> None:
    run = Run(config())
    lr = run.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    with pytest.raises(DirectiveError, match="micro_batch_size: not a field of this directive"):
        run.queue.clamp(lr.directive.id, {"micro_batch_size": 4})


def test_an_operator_returns_a_cut_lr_to_the_run_default_in_one_directive() -> None:
    run = Run(config())
    cut = run.queue.propose_raw({"lr_multiplier": 0.5}, "operator")
    run.queue.approve(cut.directive.id)
    run.boundary()
    answer = answer_request(run.queue, Propose(id="p", reset=["lr_multiplier"], rationale="undo"))
    assert answer.kind == "ok", answer
    back = answer.result["directive"]  # type: ignore[union-attr]
    assert back["requested"] == back["allowed"] == {"lr_multiplier": 1.0}
    assert back["in_effect"] == {"lr_multiplier": 0.5}
    assert any("run's default" in r for r in back["reasons"])
    run.queue.approve(back["id"])
    run.boundary()
    assert run.queue.effective["lr_multiplier"] == 1.0
    # a planner's 1.0 is still clamped: only the operator's return is let past the bound
    planner = run.queue.propose_raw({"lr_multiplier": 1.0}, "rules")
    assert planner.view().allowed == {"lr_multiplier": 0.85}


def test_a_reset_of_a_field_the_run_leaves_unset_or_also_set_is_refused() -> None:
    run = Run(build_run_config({"train": {"grad_clip": 0.0}}))
    assert "gradient_clip_norm" not in run_defaults(run.queue.config)
    refused = answer_request(run.queue, Propose(id="p", reset=["gradient_clip_norm"]))
    assert refused.kind == "error" and refused.reason.startswith("gradient_clip_norm:")  # type: ignore[union-attr]
    both = answer_request(run.queue, Propose(id="p", values={"lr_multiplier": 0.5}, reset=["lr_multiplier"]))
    assert both.kind == "error" and "both set and reset" in both.reason  # type: ignore[union-attr]


def growing_run() -> tuple[Run, RulePlanning]:
    raw = {"train": {"micro_batch": 4, "global_batch": 16}, "memory": {"max_micro_batch": 16}}
    run = Run(build_run_config({**raw, "policy": {"rate_limit": 100}}))
    return run, RulePlanning(run.queue)


def roomy(step: int, micro_batch: int = 4) -> Any:
    return sample(step, micro_batch=micro_batch, grad_accum=16 // micro_batch, mem_step_peak=10 * (1 << 20))


def test_no_growth_into_a_size_that_ran_out_of_memory_lately() -> None:
    control, planner = growing_run()
    for step in range(1, 52):  # steady headroom at 4 for 50 steps: the planner suggests 8
        control.queue.on_step(roomy(step))
        planner.on_step(roomy(step), lambda _: None)
    assert [e.directive.values() for e in control.queue.entries.values()] == [{"micro_batch_size": 8}]

    run, planner = growing_run()
    for step in range(1, 51):  # the same headroom at 4 ...
        run.queue.on_step(roomy(step))
        planner.on_step(roomy(step), lambda _: None)
    run.queue.on_oom(8, step=50)  # ... but 8 ran out of memory at step 50
    for step in range(51, 120):
        run.queue.on_step(roomy(step))
        planner.on_step(roomy(step), lambda _: None)
    assert run.queue.entries == {}  # nothing suggested
    asked = run.queue.propose_raw({"micro_batch_size": 8}, "operator")
    assert asked.state == "rejected"
    assert "out of memory at micro-batch 8 at step 50" in asked.view().reasons[0]
    bigger = run.queue.propose_raw({"micro_batch_size": 16}, "operator")
    assert bigger.state == "rejected"  # above a size that failed: no better
    retry = run.queue.config.memory.retry_after_steps
    run.queue.on_step(roomy(50 + retry))
    assert run.queue.propose_raw({"micro_batch_size": 8}, "operator").state == "pending"


fields_st = st.lists(st.sampled_from(DIRECTIVE_FIELDS), min_size=1, max_size=4, unique=True)
VALUES = {
    "lr_multiplier": st.sampled_from([0.05, 0.3, 0.5, 0.7, 0.85, 1.0, 2.0]),
    "gradient_clip_norm": st.sampled_from([0.1, 0.5, 1.0, 1.25, 5.0]),
    "loss_scale_initial_power": st.integers(0, 16),
    "micro_batch_size": st.sampled_from([4, 8]),
}


@st.composite
def values_st(draw: Any) -> dict[str, Any]:
    return {name: draw(VALUES[name]) for name in draw(fields_st)}


action_st = st.one_of(
    st.tuples(st.just("propose"), values_st(), st.sampled_from(["rules", "operator"])),
    st.tuples(st.just("approve"), st.integers(0, 30)),
    st.tuples(st.just("clamp"), st.integers(0, 30), values_st()),
    st.tuples(st.just("reject"), st.integers(0, 30)),
    st.tuples(st.just("boundary")),
    st.tuples(st.just("restart")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(action_st, max_size=40), st.sampled_from(["manual", "auto"]))
def test_property_the_applied_patch_is_always_the_directives_own_allowed_fields(
    actions: list[tuple[Any, ...]], approval: str
) -> None:
    run = Run(config(approval=approval))
    for action in actions:
        ids = list(run.queue.entries)
        try:
            if action[0] == "propose":
                run.queue.propose_raw(action[1], action[2])
            elif action[0] in ("approve", "clamp", "reject") and ids:
                target = ids[action[1] % len(ids)]
                if action[0] == "approve":
                    run.queue.approve(target)
                elif action[0] == "clamp":
                    run.queue.clamp(target, action[2])
                else:
                    run.queue.reject(target, "no")
            elif action[0] == "boundary":
                run.boundary()
            elif action[0] == "restart":
                run.restart()
                run.boundary()
        except (DirectiveError, DirectiveRefused):
            pass
    run.boundary()
    entries = run.queue.entries
    for message in run.sent:
        if message.resend:
            assert not ONE_SHOT_FIELDS & set(message.values)
        else:  # what went to the trainer for a directive: its own allowed fields, nothing else
            entry = entries[message.directive_id]
            assert message.values == entry.verdict.patch
            assert set(message.values) <= set(entry.directive.values())
    applied_ids = [e["directive_id"] for e in run.applied()]
    assert len(applied_ids) == len(set(applied_ids))  # one apply per directive, restarts or not
    for echo in run.applied():
        entry = entries[echo["directive_id"]]
        assert echo["applied"] == entry.verdict.patch  # the applied patch is its own allowed fields
        view = echo["directive"]
        assert set(view["allowed"]) <= set(view["requested"]) and set(view["in_effect"]) <= set(
            view["requested"]
        )
        assert all(math.isfinite(v) for v in echo["applied"].values())


def test_a_restarted_supervisor_remembers_the_ooms_its_store_holds(tmp_path: Path) -> None:
    oom = MemoryAdapted(
        kind="oom",
        reason="CUDA out of memory",
        step=50,
        from_micro_batch=8,
        to_micro_batch=4,
        from_grad_accum=2,
        to_grad_accum=4,
    )
    shrink = oom.model_copy(update={"kind": "shrink", "from_micro_batch": 16, "step": 60})
    with Store(tmp_path / "telemetry.sqlite") as store:
        for payload in (oom, shrink):
            store.append_event(payload.event_type, data=payload.data())
        assert stored_ooms(store) == {8: 50}  # the OOM, not the pressure shrink
