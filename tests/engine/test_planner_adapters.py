"""External planner adapters: a JSON-lines command and an OpenAI-compatible
endpoint on loopback. Bad output of every kind ends as a stored rejection with a reason."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from planner_samples import sample

from engine.config.config_file import ConfigError, build_run_config
from engine.config.run_config import RunConfig
from engine.directives.planners.command import MAX_FAILURES, CommandPlanner
from engine.directives.planners.external import ExternalPlanner, TelemetrySummary, hand_over
from engine.directives.planners.openai_http import OpenAIPlanner
from engine.directives.planners.reply import PlannerReply, parse_reply
from engine.directives.queue import DirectiveQueue
from engine.run.storage.store import Store
from tests.fakes.event_log import EventLog

FAKE_PLANNER = Path(__file__).resolve().parents[1] / "fakes" / "fake_planner.py"


class Harness:
    """A directive queue whose recorded events are kept in a list (the store's stand-in)."""

    def __init__(self, config: RunConfig | None = None) -> None:
        self.log = EventLog()
        config = config or build_run_config({"policy": {"rate_limit": 10_000}})
        self.queue = DirectiveQueue(config, self.log, lambda _m: True)
        self.queue.latest = sample(5)

    def decided(self) -> list[dict[str, Any]]:
        return [d["directive"] for d in self.log.data_of("directive_decided")]


def summary(step: int = 5) -> dict[str, Any]:
    return TelemetrySummary().of(sample(step), {})


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def command(
    *actions: str, timeout_s: float = 5.0, clock: Clock | None = None
) -> tuple[CommandPlanner, EventLog]:
    log = EventLog()
    argv = [sys.executable, str(FAKE_PLANNER), *actions]
    return CommandPlanner(argv, timeout_s, log, clock=clock or Clock()), log


# ------------------------------------------------------------------------ replies


def test_reply_parsing_refuses_with_reasons() -> None:
    assert parse_reply('{"lr_multiplier": 0.5, "rationale": "why"}').values == {"lr_multiplier": 0.5}
    assert parse_reply("{}").values == {} and parse_reply("{}").problem is None
    assert parse_reply('```json\n{"micro_batch_size": 4}\n```').values == {"micro_batch_size": 4}
    assert "not JSON" in (parse_reply("nope").problem or "")
    assert "JSON object" in (parse_reply("[1]").problem or "")
    assert "not JSON" in (parse_reply("[" * 60_000).problem or "")  # hostile nesting
    assert "rationale" in (parse_reply('{"rationale": {"a": 1}}').problem or "")


async def test_a_refused_reply_is_stored_with_its_specific_reason(tmp_path: Path) -> None:
    """The decision row, not only the event, says why a planner's reply was refused."""
    replies = {
        "malformed": parse_reply("the loss looks fine to me"),
        "slow": PlannerReply(problem="no reply within 0.5 s"),
        "hostile": parse_reply("[" * 60_000),
        "edge": PlannerReply(values={"lr_multiplier": float("nan")}),
    }
    with Store(tmp_path / "telemetry.sqlite") as store:
        log = EventLog()
        config = build_run_config({"policy": {"rate_limit": 10_000}})
        queue = DirectiveQueue(config, log, lambda _m: True, keep=store.add_decision)
        queue.latest = sample(5)
        entries = {name: hand_over(queue, "command:fake", reply) for name, reply in replies.items()}
        rows = {d.directive_id: d for _, d in store.decisions()}
    expected = {
        "malformed": "not JSON",
        "slow": "no reply within 0.5 s",
        "hostile": "not JSON",
        "edge": "refused at the edge: lr_multiplier",
    }
    events = {e["directive"]["id"]: e["verdict"] for e in log.data_of("directive_decided")}
    for name, entry in entries.items():
        assert entry is not None and entry.state == "rejected"
        row = rows[entry.directive.id]
        assert row.state == "rejected" and row.source == "command:fake"
        assert row.reasons[0].startswith("planner output refused: "), row.reasons
        assert expected[name] in row.reasons[0], (name, row.reasons)
        assert events[entry.directive.id]["reasons"] == row.reasons  # the event says the same
        assert entry.view().reasons == row.reasons  # and the console's view, once


# ------------------------------------------------------------------------ command


@pytest.mark.slow
async def test_command_good_malformed_huge_and_none_replies() -> None:
    planner, _ = command("good", "malformed", "huge", "none", "nan", "good")
    h = Harness()
    try:
        replies = [await planner.ask(summary(5)) for _ in range(6)]
    finally:
        await planner.close()
    assert replies[0].values == {"lr_multiplier": 2.0} and replies[0].rationale == "fake at step 5"
    assert "not JSON" in (replies[1].problem or "")
    assert "cap" in (replies[2].problem or "")
    assert replies[3].values == {} and replies[3].problem is None
    assert replies[5].values == {"lr_multiplier": 2.0}  # the stream stayed in step after 1 MB
    entries = [hand_over(h.queue, planner.source, r) for r in replies]
    assert entries[3] is None  # "{}" proposes nothing
    good = entries[0]
    assert good is not None and good.state == "pending" and good.verdict.decision == "clamp"
    assert good.verdict.patch == {"lr_multiplier": 0.85}
    refused = [e for e in (entries[1], entries[2], entries[4]) if e is not None]
    assert [e.state for e in refused] == ["rejected"] * 3
    assert "not JSON" in refused[0].view().reasons[0]
    assert "lr_multiplier" in refused[2].view().reasons[0]  # NaN: the edge names the field
    stored = h.decided()
    assert len(stored) == 3 and all(d["source"] == planner.source for d in stored)


@pytest.mark.slow
async def test_command_that_hangs_times_out_and_is_restarted() -> None:
    clock = Clock()
    planner, events = command("hang", timeout_s=0.5, clock=clock)
    try:
        reply = await planner.ask(summary())
        assert "no reply within 0.5 s" in (reply.problem or "") and planner.proc is None
        assert (await planner.ask(summary())).values == {}  # backing off: nothing this tick
        clock.now += 60.0
        again = await planner.ask(summary())  # a fresh process: "hang" again
        assert "no reply" in (again.problem or "") and planner.starts == 2
        assert [e.type for e in events.events] == ["planner_restarted"]
    finally:
        await planner.close()


@pytest.mark.slow
async def test_command_that_keeps_dying_is_disabled_with_an_event() -> None:
    clock = Clock()
    planner, events = command("exit", clock=clock)
    h = Harness()
    for _ in range(MAX_FAILURES):
        reply = await planner.ask(summary())
        assert "exited" in (reply.problem or "")
        assert hand_over(h.queue, planner.source, reply) is not None
        clock.now += 120.0
    assert planner.disabled and events.events[-1].type == "planner_disabled"
    assert (await planner.ask(summary())).values == {}  # disabled: silent
    assert len(h.decided()) == MAX_FAILURES


@pytest.mark.slow
async def test_a_stray_second_line_is_discarded_never_a_later_asks_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``{}`` and ``{"lr_multiplier": 0.5}`` in one write answer the first ask with ``{}``;
    the second line is no ask's answer: the next ticks propose nothing, let alone lr 0.5."""
    h = Harness(build_run_config({"policy": {"approval": "auto", "rate_limit": 10_000}}))
    sent: list[Any] = []
    h.queue.send = lambda message: sent.append(message) or True
    adapter, _ = command("double", "none", "none")
    planner = ExternalPlanner(adapter, h.queue, every_steps=1)
    try:
        for step in (1, 2, 3):
            planner.on_step(sample(step), asyncio.ensure_future)
            assert planner.in_flight is not None and await planner.in_flight is None  # "{}": nothing
    finally:
        await planner.close()
    assert h.log.data_of("directive_proposed") == [] and h.decided() == [] and sent == []
    assert adapter.stray_lines == 1
    assert (
        "discarded a line outside an ask (1 so far)" in caplog.text and "a stray second line" in caplog.text
    )


@pytest.mark.slow
async def test_command_that_cannot_start_is_a_refusal() -> None:
    planner = CommandPlanner(["/nonexistent/planner"], 1.0, EventLog())
    assert "could not start" in ((await planner.ask(summary())).problem or "")


# ------------------------------------------------------------------------- openai


class StubServer:
    """A chat-completions stub on 127.0.0.1: ``mode`` says how it answers the next request."""

    def __init__(self) -> None:
        self.mode = "good"
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> StubServer:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: Any) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        body = json.loads(await reader.readexactly(int(headers["content-length"])))
        self.requests.append((headers, body))
        if self.mode == "hang":
            await asyncio.sleep(30)
        status, content = {
            "good": (200, '{"lr_multiplier": 5.0, "rationale": "the loss is flat"}'),
            "none": (200, "{}"),
            "prose": (200, "Sure! I would lower the learning rate a bit."),
            "error": (500, ""),
        }[self.mode]
        payload = {"choices": [{"message": {"role": "assistant", "content": content}}]}
        data = json.dumps(payload).encode() if status == 200 else b"internal error"
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        writer.close()


async def test_openai_adapter_good_reply_is_clamped_and_bad_ones_are_stored_rejections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STUB_KEY", "sk-test")
    h = Harness()
    async with StubServer() as stub:
        # Answers may take long on a loaded machine: only the hang is asked with a short timeout.
        patient = OpenAIPlanner(stub.url, "stub-model", "STUB_KEY", timeout_s=60.0)
        hasty = OpenAIPlanner(stub.url, "stub-model", "STUB_KEY", timeout_s=0.5)
        outcomes = {}
        for mode in ("good", "none", "prose", "error", "hang"):
            stub.mode = mode
            planner = hasty if mode == "hang" else patient
            outcomes[mode] = hand_over(h.queue, planner.source, await planner.ask(summary()))
    headers, body = stub.requests[0]
    assert headers["authorization"] == "Bearer sk-test" and body["model"] == "stub-model"
    assert body["messages"][0]["role"] == "system" and json.loads(body["messages"][1]["content"])["step"] == 5
    good = outcomes["good"]
    assert (
        good is not None
        and good.verdict.decision == "clamp"
        and good.verdict.patch == {"lr_multiplier": 0.85}
    )
    assert good.state == "pending" and "the loss is flat" in good.view().reasons[0]
    assert outcomes["none"] is None
    reasons = {m: outcomes[m].view().reasons[0] for m in ("prose", "error", "hang")}  # type: ignore[union-attr]
    assert "not JSON" in reasons["prose"]
    assert "HTTP 500" in reasons["error"]
    assert "no reply within 0.5 s" in reasons["hang"]
    assert [d["state"] for d in h.decided()] == ["rejected"] * 3
    assert all(d["source"] == "http:stub-model" for d in h.decided())


async def test_openai_adapter_connection_refused_is_a_refusal() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    reply = await OpenAIPlanner(f"http://127.0.0.1:{port}/v1", "m", None, 1.0).ask(summary())
    assert "request failed" in (reply.problem or "")


# ------------------------------------------------------------------ driver, config


async def test_driver_asks_every_n_steps_without_blocking_the_loop() -> None:
    h = Harness()
    async with StubServer() as stub:
        stub.mode = "hang"
        planner = ExternalPlanner(OpenAIPlanner(stub.url, "m", None, 0.3), h.queue, every_steps=2)
        tasks: list[asyncio.Task[Any]] = []

        def spawn(coro: Any) -> asyncio.Task[Any]:
            tasks.append(asyncio.ensure_future(coro))
            return tasks[-1]

        for step in range(1, 11):
            planner.on_step(sample(step), spawn)
        # on_step only starts a task: the request goes out from it, once the loop runs.
        assert len(tasks) == 1 and not tasks[0].done() and stub.requests == []  # one ask at a time
        entry = await tasks[0]
        assert entry is not None and entry.state == "rejected" and len(stub.requests) == 1
        planner.on_step(sample(11), spawn)  # not a multiple of every_steps: no ask
        assert len(tasks) == 1
        planner.on_step(sample(12), spawn)
        assert len(tasks) == 2
        await tasks[1]
    asked_at = [json.loads(body["messages"][1]["content"])["step"] for _, body in stub.requests]
    assert asked_at == [2, 12]  # the first step that is a multiple of 2, then the next one free
    await planner.close()


class Gate:
    """An adapter that answers ``reply`` once ``opened`` is set (newer steps come meanwhile)."""

    source = "command:gate"

    def __init__(self, reply: PlannerReply) -> None:
        self.reply = reply
        self.opened = asyncio.Event()

    async def ask(self, summary: dict[str, Any]) -> PlannerReply:
        await self.opened.wait()
        return self.reply

    async def close(self) -> None:
        pass


async def test_a_reply_is_based_on_the_step_it_was_asked_about_not_a_newer_one() -> None:
    h = Harness()  # max_staleness_steps: 500
    gate = Gate(
        PlannerReply(values={"lr_multiplier": 0.5}, rationale="flat", evidence=["loss 2.0 at step 10"])
    )
    planner = ExternalPlanner(gate, h.queue, every_steps=10)
    planner.on_step(sample(10), asyncio.ensure_future)
    h.queue.latest = sample(700)  # the trainer went on while the planner thought
    gate.opened.set()
    assert planner.in_flight is not None
    entry = await planner.in_flight
    assert (
        entry is not None and entry.directive.step == 10 and entry.view().evidence == ["loss 2.0 at step 10"]
    )
    assert entry.state == "rejected" and any("stale: based on step 10" in r for r in entry.view().reasons)


def test_config_validates_planner_fields() -> None:
    ok = build_run_config(
        {"policy": {"planner": "command", "planner_command": ["plan"], "planner_every_steps": 10}}
    )
    assert ok.policy.planner_command == ["plan"]
    for bad in (
        {"planner": "command"},
        {"planner": "openai", "planner_url": "http://127.0.0.1:1/v1"},
        {"planner": "openai", "planner_url": "ftp://x", "planner_model": "m"},
        {"planner_api_key_env": "not a name"},
        {"planner_timeout_s": 0},
    ):
        with pytest.raises(ConfigError):
            build_run_config({"policy": bad})


def test_the_summary_carries_the_step_s_metrics_and_the_newest_eval() -> None:
    from engine.events import EvalCompleted

    summary = TelemetrySummary()
    before = summary.of(sample(10).model_copy(update={"metrics": {"accuracy": 0.5}}), {})
    assert before["metrics"] == {"accuracy": 0.5}
    assert (before["eval_step"], before["eval_loss"], before["eval_metrics"]) == (None, None, {})
    summary.last_eval = EvalCompleted(step=8, loss=2.5, batches=4, seconds=0.1, metrics={"ppl": 12.0})
    after = json.loads(json.dumps(summary.of(sample(11), {})))  # one JSON object, as sent
    assert (after["eval_step"], after["eval_loss"], after["eval_metrics"]) == (8, 2.5, {"ppl": 12.0})
    summary.last_eval = EvalCompleted(step=9, loss=float("nan"), batches=4, seconds=0.1)
    assert summary.of(sample(12), {})["eval_loss"] is None  # JSON has no NaN
