"""An OpenAI-compatible planner has one deadline for its whole exchange, and a hung exchange
costs nothing but its own ask: an endpoint that sends its headers and then one byte a
second (tests.fakes.trickle_endpoint) gets a refusal naming the deadline, its connection
hung up on, and no thread left behind, however often it is asked. The exchange reads what
HTTP/1.1 sends and refuses, with a reason, what does not fit. A planner that keeps failing
is backed off, with one warning alert, and told about once per skip period."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Any

import pytest
from planner_samples import sample

from engine.alerts.health import HealthBoard
from engine.config.config_file import build_run_config
from engine.directives.planners.ask_backoff import BACKOFF_S
from engine.directives.planners.external import ExternalPlanner, TelemetrySummary
from engine.directives.planners.http_exchange import HttpError, HttpReply, post
from engine.directives.planners.openai_http import MAX_BODY_BYTES, OpenAIPlanner, content_reply
from engine.directives.planners.reply import NOT_ASKED, PlannerReply, unanswered
from engine.directives.queue import DirectiveQueue
from engine.domain import Event
from engine.events import PLANNER_RULE, AlertRaised
from tests.fakes.event_log import EventLog
from tests.fakes.trickle_endpoint import TrickleEndpoint
from tests.waiting import until

TIMEOUT_S = 0.5


def summary(step: int = 5) -> dict[str, Any]:
    return TelemetrySummary().of(sample(step), {})


async def test_a_trickling_endpoint_is_refused_at_the_deadline_without_a_thread_left() -> None:
    threads = threading.active_count()
    # a byte every 0.1 s: a timeout per read (of TIMEOUT_S) never fires, only a deadline does
    async with TrickleEndpoint(interval_s=0.1) as endpoint:
        planner = OpenAIPlanner(endpoint.url, "m", None, TIMEOUT_S)
        for ask in range(1, 4):
            reply = await planner.ask(summary())
            assert reply.problem is not None and f"no reply within {TIMEOUT_S:g} s" in reply.problem
            assert threading.active_count() == threads, threading.enumerate()  # no worker thread
            await until(
                lambda n=ask: endpoint.hung_up == n and endpoint.open == 0,
                what=f"the client to hang up on exchange {ask}",
                seen=lambda: (endpoint.connections, endpoint.open, endpoint.hung_up),
            )
        assert endpoint.connections == 3


# ------------------------------------------------------------- the HTTP exchange


def completion(content: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


async def answered_with(raw: bytes, cap: int = MAX_BODY_BYTES) -> tuple[HttpReply | None, str | None]:
    """POST to a loopback server that answers ``raw`` then closes: the reply, or the error."""
    requests: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        requests.append(head + await reader.readexactly(length))
        writer.write(raw)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reply = await asyncio.wait_for(
            post(f"http://127.0.0.1:{port}/v1/x?a=1", b"{}", {"X-K": "v"}, cap), 30
        )
        return reply, None
    except HttpError as err:
        return None, str(err)
    finally:
        server.close()
        assert not requests or requests[0].startswith(b"POST /v1/x?a=1 HTTP/1.1\r\n")
        assert not requests or f"Host: 127.0.0.1:{port}\r\n".encode() in requests[0]


async def test_the_exchange_reads_length_chunked_and_to_the_end_bodies() -> None:
    body = completion('{"lr_multiplier": 0.5}')
    by_length = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    chunked = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"%x;ext=1\r\n%s\r\n%x\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:])
    )
    to_the_end = b"HTTP/1.0 200 OK\r\n\r\n" + body
    for raw in (by_length, chunked, to_the_end):
        reply, error = await answered_with(raw)
        assert error is None and reply == HttpReply(200, body), (raw[:40], error)


async def test_the_exchange_refuses_what_does_not_fit_with_a_reason() -> None:
    big = b"x" * 200
    cases = {
        b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + big: "over the 100-byte cap",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nc8\r\n"
        + big
        + b"\r\n0\r\n\r\n": "over the 100",
        b"HTTP/1.1 200 OK\r\n\r\n" + big: "over the 100-byte cap",
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort": "closed before the reply was complete",
        b"SSH-2.0-OpenSSH\r\n\r\n": "not an HTTP/1.x status line",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n": "bad Content-Length",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n": "bad chunk size",
        b"HTTP/1.1 200 OK\r\nX: " + b"h" * 10_000 + b"\r\n\r\n": "line over",
    }
    for raw, named in cases.items():
        reply, error = await answered_with(raw, cap=100)
        assert reply is None and error is not None and named in error, (raw[:40], error)


async def test_an_http_error_or_a_dead_port_is_a_failed_ask_and_prose_is_an_answer() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    dead = await OpenAIPlanner(f"http://127.0.0.1:{port}/v1", "m", None, 5.0).ask(summary())
    assert dead.outcome == "failed" and "cannot connect" in (dead.problem or "")
    assert content_reply("<html>").outcome == "answered" and content_reply("<html>").problem


async def test_an_api_key_with_a_line_break_is_never_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAD_KEY", "sk-1\r\nX-Injected: yes")
    async with TrickleEndpoint() as endpoint:
        reply = await OpenAIPlanner(endpoint.url, "m", "BAD_KEY", 5.0).ask(summary())
        assert reply.outcome == "failed" and "line break" in (reply.problem or "")
        assert "sk-1" not in (reply.problem or "") and endpoint.connections == 0


# ---------------------------------------------------------------- the backoff


class Script:
    """An adapter answering from a script: "fail", "answer" ("{}") or "not asked"."""

    source = "http:scripted"

    def __init__(self, *script: str) -> None:
        self.script = list(script)
        self.asks = 0

    async def ask(self, summary: dict[str, Any]) -> PlannerReply:
        self.asks += 1
        step = self.script.pop(0)
        if step == "fail":
            return unanswered(f"no reply within 0.5 s (ask {self.asks})")
        return NOT_ASKED if step == "not asked" else PlannerReply()

    async def close(self) -> None:
        pass


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_failing_planner_is_backed_off_with_one_alert_and_told_once_per_period() -> None:
    log = EventLog()
    queue = DirectiveQueue(build_run_config({"policy": {"rate_limit": 10_000}}), log, lambda _m: True)
    queue.latest = sample(5)
    alerts = EventLog()
    clock = Clock()
    adapter = Script("fail", "fail", "fail", "not asked", "answer", "answer")
    planner = ExternalPlanner(adapter, queue, every_steps=1, alert=alerts, clock=clock)
    step = 0

    async def tick() -> None:
        nonlocal step
        step += 1
        planner.on_step(sample(step), asyncio.ensure_future)
        if planner.in_flight is not None:
            await planner.in_flight

    def reasons() -> list[str]:
        return [d["directive"]["reasons"][0] for d in log.data_of("directive_decided")]

    await tick()
    await tick()  # the second failure in a row: backing off, one warning alert
    assert adapter.asks == 2 and [e.severity for e in alerts.events] == ["warning"]
    fired = AlertRaised.of(alerts.events[0])
    assert fired is not None and fired.rule == PLANNER_RULE and not fired.resolved
    assert fired.model_extra == {
        "source": "http:scripted",
        "failures": 2,
        "backoff_s": BACKOFF_S,
        "reason": "no reply within 0.5 s (ask 2)",
    }
    for _ in range(5):
        await tick()  # skipped: told once for this period
    assert adapter.asks == 2 and len(reasons()) == 3
    assert reasons()[2].startswith("planner output refused: not asked: http:scripted failed 2 asks in a row")
    clock.now += BACKOFF_S
    await tick()  # the probe fails: twice as long, no second alert
    await tick()
    assert adapter.asks == 3 and len(alerts.events) == 1 and len(reasons()) == 5
    assert "failed 3 asks in a row" in reasons()[4] and "6 skipped so far" in reasons()[4]
    clock.now += 2 * BACKOFF_S
    await tick()  # not asked (a command waiting for its restart): no answer, no failure
    assert planner.backoff.firing and planner.backoff.failures == 3
    await tick()  # an answer: the backoff ends, the alert resolves
    await tick()
    assert adapter.asks == 6 and planner.backoff.due(clock.now)
    resolved = AlertRaised.of(alerts.events[1])
    assert resolved is not None and resolved.resolved and alerts.events[1].severity == "info"
    assert resolved.model_extra == {"source": "http:scripted", "failures": 3, "skipped": 6}
    assert len(alerts.events) == 2
    assert all(d["directive"]["state"] == "rejected" for d in log.data_of("directive_decided"))
    assert [r.split(": ", 2)[1] for r in reasons()] == [
        "no reply within 0.5 s (ask 1)",
        "no reply within 0.5 s (ask 2)",
        "not asked",
        "no reply within 0.5 s (ask 3)",
        "not asked",
    ]


def test_a_planner_alert_never_blocks_directives() -> None:
    board = HealthBoard()
    alert = AlertRaised(rule=PLANNER_RULE, state="firing", source="http:m")
    event = Event(
        seq=1, ts=0.0, type=alert.event_type, severity="warning", message="failing", data=alert.data()
    )
    assert board.observe(event) and board.active == {PLANNER_RULE: "failing"} and board.problems() == ()
