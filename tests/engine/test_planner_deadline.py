"""An OpenAI-compatible planner has one deadline for its whole exchange, and a hung exchange
costs nothing but its own ask: an endpoint that sends its headers and then one byte a
second (tests.fakes.trickle_endpoint) gets a refusal naming the deadline, its connection
hung up on, and no thread left behind, however often it is asked."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Any

import pytest
from planner_samples import sample

from engine.directives.planners.external import TelemetrySummary
from engine.directives.planners.http_exchange import HttpError, HttpReply, post
from engine.directives.planners.openai_http import MAX_BODY_BYTES, OpenAIPlanner, content_reply
from tests.fakes.trickle_endpoint import TrickleEndpoint
from tests.waiting import until

TIMEOUT_S = 0.5


def summary(step: int = 5) -> dict[str, Any]:
    return TelemetrySummary().of(sample(step), {})


async def test_a_trickling_endpoint_is_refused_at_the_deadline_without_a_thread_left() -> None:
    threads = threading.active_count()
    async with TrickleEndpoint() as endpoint:
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
