"""The directive lifecycle in the supervisor's queue, with a simulated trainer echo."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from planner_samples import sample

from engine.config.config_file import build_run_config
from engine.config.run_config import RunConfig
from engine.directives.directive import DirectiveRefused
from engine.directives.operator_request import answer_request
from engine.directives.queue import DirectiveError, DirectiveQueue
from engine.domain import DIRECTIVE_FIELDS, DecisionRecord, Event
from engine.events import DirectiveApplied
from engine.wire.protocol import ApplyDirective, Approve, Clamp, Propose, Reject
from tests.fakes.event_log import EventLog


class Harness:
    """A queue with a recorded event log, a fake clock and a trainer that echoes."""

    def __init__(self, config: RunConfig) -> None:
        self.now = 1_000_000.0
        self.log = EventLog()
        self.sent: list[ApplyDirective] = []
        self.kept: list[DecisionRecord] = []
        self.queue = DirectiveQueue(config, self.log, self.send, lambda: self.now, self.kept.append)
        self.queue.latest = sample(step=5)

    @property
    def events(self) -> list[Event]:
        return self.log.events

    def send(self, message: Any) -> bool:
        self.sent.append(message)
        return True

    def echo_all(self, step: int = 6) -> None:
        """The trainer applies everything sent (its own hard check is tested elsewhere)."""
        for message in self.sent:
            echo = DirectiveApplied(
                directive_id=message.directive_id, applied=dict(message.values), step=step
            )
            self.queue.on_applied(echo)
        self.sent.clear()

    def of(self, type: str) -> list[dict[str, Any]]:
        return self.log.data_of(type)


def config(**policy: Any) -> RunConfig:
    return build_run_config({"policy": {"rate_limit": 10_000, **policy}})


def test_manual_lifecycle_approve_then_applied() -> None:
    h = Harness(config())
    entry = h.queue.propose_raw({"lr_multiplier": 0.5}, "operator", "try lower")
    assert entry.state == "pending" and not h.sent
    proposed = h.of("directive_proposed")[0]
    assert proposed["directive"]["state"] == "pending" and proposed["verdict"]["decision"] == "allow"
    h.queue.approve(entry.directive.id)
    assert [m.values for m in h.sent] == [{"lr_multiplier": 0.5}]
    h.echo_all(step=6)
    applied = h.of("directive_applied")[0]
    assert applied["directive"]["state"] == "applied" and applied["step"] == 6
    assert h.queue.effective == {"lr_multiplier": 0.5}
    with pytest.raises(DirectiveError, match="not pending"):
        h.queue.approve(entry.directive.id)


def test_clamp_reject_expire_and_auto() -> None:
    h = Harness(config())
    a = h.queue.propose_raw({"lr_multiplier": 0.5, "gradient_clip_norm": 1.0}, "rules")
    h.queue.clamp(a.directive.id, {"lr_multiplier": 0.3})
    assert h.sent[-1].values == {"lr_multiplier": 0.3, "gradient_clip_norm": 1.0}
    b = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    with pytest.raises(DirectiveError, match="lr_multiplier"):
        h.queue.clamp(b.directive.id, {"lr_multiplier": math.nan})
    refused = h.queue.clamp(b.directive.id, {"lr_multiplier": 0.95})  # over the bound: re-check rejects
    assert refused.state == "rejected"
    c = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    assert h.queue.reject(c.directive.id, "not now").state == "rejected"
    d = h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    h.now += 10_000
    h.queue.on_step(sample(step=6))
    assert h.queue.entries[d.directive.id].state == "expired"

    auto = Harness(config(approval="auto"))
    e = auto.queue.propose_raw({"lr_multiplier": 2.0}, "rules")
    assert e.state == "clamped" and auto.sent[-1].values == {"lr_multiplier": 0.85}


def test_unsent_directives_wait_for_a_trainer_and_effective_values_are_resent() -> None:
    h = Harness(config(approval="auto"))
    connected = False
    h.queue.send = lambda m: connected and h.send(m)  # type: ignore[assignment]
    h.queue.propose_raw({"lr_multiplier": 0.5}, "rules")
    assert not h.sent
    connected = True
    h.queue.trainer_connected()
    assert [m.values for m in h.sent] == [{"lr_multiplier": 0.5}]
    h.echo_all()
    h.queue.trainer_connected()  # a restarted trainer gets the values in effect again
    assert h.sent[-1].values == {"lr_multiplier": 0.5}


def test_flood_of_ten_thousand_every_verdict_kept_events_only_first_and_summary() -> None:
    h = Harness(build_run_config({}))
    for i in range(10_000):
        h.queue.propose_raw({"lr_multiplier": 0.5}, "flood", f"#{i}")
    h.queue.flush_rate_limited()
    limit = h.queue.config.policy.rate_limit
    assert len(h.of("directive_proposed")) == limit
    counted = h.of("directives_rate_limited")
    assert counted and counted[0]["count"] == 10_000 - limit
    assert len(h.events) < limit * 2 + 3  # the consoles' event stream is not flooded
    assert len(h.queue.entries) <= 1000  # nor the supervisor's memory
    assert len(h.kept) == 10_000  # but every verdict is kept, one record each
    assert len({d.directive_id for d in h.kept}) == 10_000
    limited = [d for d in h.kept if d.rate_limited]
    assert len(limited) == 10_000 - limit
    assert all(d.verdict == "reject" and d.state == "rejected" and d.reasons for d in limited)
    assert [d.state for d in h.kept[:limit]] == ["pending"] * limit


def test_rate_limit_summary_is_periodic_not_per_step() -> None:
    h = Harness(config(rate_limit=1))
    for step in range(6, 46):  # 40 steps, 0.1 s apart, two proposals each
        h.now += 0.1
        h.queue.propose_raw({"lr_multiplier": 0.5}, "flood")
        h.queue.propose_raw({"lr_multiplier": 0.5}, "flood")
        h.queue.on_step(sample(step))
    summaries = h.of("directives_rate_limited")
    assert 1 <= len(summaries) <= 3  # 4 s of steps: one per SUMMARY_EVERY_S (2 s), not 40
    assert len(h.kept) == 80
    h.queue.flush_rate_limited()
    assert sum(s["count"] for s in h.of("directives_rate_limited")) == 79  # all but the admitted one


def test_pending_cap() -> None:
    h = Harness(config(max_pending=2))
    states = [h.queue.propose_raw({"lr_multiplier": 0.5}, "rules").state for _ in range(3)]
    assert states == ["pending", "pending", "rejected"]


def test_answer_request_never_raises() -> None:
    h = Harness(config())
    assert answer_request(None, Approve(id="a", directive_id="x")).kind == "error"
    assert "no directive" in answer_request(h.queue, Approve(id="a", directive_id="x")).reason  # type: ignore[union-attr]
    bad = answer_request(h.queue, Propose(id="p", values={"lr_multiplier": "lots"}))
    assert bad.kind == "error" and "lr_multiplier" in bad.reason  # type: ignore[union-attr]
    bad = answer_request(h.queue, Propose(id="p", values={"x": {"y": 1}}))
    assert bad.kind == "error" and "x" in bad.reason  # type: ignore[union-attr]
    ok = answer_request(h.queue, Propose(id="p", values={"lr_multiplier": 0.5}))
    assert ok.kind == "ok"
    directive_id = ok.result["directive"]["id"]  # type: ignore[union-attr]
    assert (
        answer_request(h.queue, Clamp(id="c", directive_id=directive_id, values={"lr_multiplier": 0.4})).kind
        == "ok"
    )
    assert answer_request(h.queue, Reject(id="r", directive_id=directive_id)).kind == "error"


values_st = st.dictionaries(
    st.sampled_from(DIRECTIVE_FIELDS),
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(-100, 100_000), st.text(max_size=3)
    ),
    max_size=4,
)
action_st = st.one_of(
    st.tuples(st.just("propose"), values_st, st.sampled_from(["rules", "operator", "http:x"])),
    st.tuples(st.just("approve"), st.integers(0, 30)),
    st.tuples(st.just("clamp"), st.integers(0, 30), values_st),
    st.tuples(st.just("reject"), st.integers(0, 30)),
    st.tuples(st.just("tick"), st.floats(0, 400)),
    st.tuples(st.just("echo")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(action_st, max_size=40), st.sampled_from(["manual", "auto"]))
@example([("propose", {"lr_multiplier": 1}, "operator")], "auto")  # the default, past the bounds
def test_property_applied_values_are_in_bounds_and_have_a_stored_decision(
    actions: list[tuple[Any, ...]], approval: str
) -> None:
    h = Harness(build_run_config({"policy": {"approval": approval, "rate_limit": 5}}))
    step = 5
    for action in actions:
        ids = list(h.queue.entries)
        try:
            if action[0] == "propose":
                h.queue.propose_raw(action[1], action[2])
            elif action[0] in ("approve", "clamp", "reject") and ids:
                target = ids[action[1] % len(ids)]
                if action[0] == "approve":
                    h.queue.approve(target)
                elif action[0] == "clamp":
                    h.queue.clamp(target, action[2])
                else:
                    h.queue.reject(target, "no")
            elif action[0] == "tick":
                h.now += action[1]
                step += 1
                h.queue.on_step(sample(step=step))
            elif action[0] == "echo":
                h.echo_all(step)
        except (DirectiveError, DirectiveRefused):
            pass
    h.echo_all(step)
    bounds, defaults = h.queue.policy.bounds, h.queue.policy.defaults
    decided = {d["verdict"]["decision_id"]: d["verdict"] for d in h.of("directive_decided")}
    for applied in h.of("directive_applied"):
        verdict = decided[applied["decision_id"]]  # every applied value has a stored decision
        assert verdict["decision"] in ("allow", "clamp")
        for name, value in applied["applied"].items():
            low, high = bounds[name]
            assert math.isfinite(value)
            # in the bounds, or the field's run default (a return to it is allowed past them)
            assert low <= value <= high or value == defaults[name], (name, value)
            assert verdict["patch"][name] == value
