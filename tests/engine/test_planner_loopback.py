"""External planners against the real policy: a real HTTP server on loopback that speaks the
chat-completions API (good, malformed, slow and hostile answers, and answers generated at
random), and the worked example command in examples/. Whatever a planner says, nothing
outside the policy's bounds is ever sent to the trainer, and every refusal is stored with
its reason."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planner_samples import sample

from engine.config.config_file import build_run_config
from engine.directives.planners.command import CommandPlanner
from engine.directives.planners.external import TelemetrySummary, hand_over
from engine.directives.planners.openai_http import SYSTEM_PROMPT, OpenAIPlanner
from engine.directives.queue import DirectiveQueue, Entry
from engine.domain import DIRECTIVE_FIELDS
from engine.wire.protocol import ApplyDirective
from tests.fakes.event_log import EventLog

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plateau_planner.py"
TIMEOUT_S = 0.5


class Answer:
    """What the server says next: a delay (s), a status and a raw body."""

    def __init__(
        self, content: Any = None, *, status: int = 200, delay_s: float = 0.0, raw: bytes | None = None
    ):
        self.status, self.delay_s = status, delay_s
        message = {"role": "assistant", "content": content}
        self.body = raw if raw is not None else json.dumps({"choices": [{"message": message}]}).encode()


class ChatServer:
    """A chat-completions endpoint on 127.0.0.1 (a thread of http.server), answering from a script."""

    def __init__(self) -> None:
        self.script: list[Answer] = []
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append({"path": self.path, "body": json.loads(body)})
                answer = outer.script.pop(0) if outer.script else Answer("{}")
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except OSError:
                    pass  # the client gave up (a slow answer): nothing to tell it

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.close()


class Run:
    """A directive queue in auto approval: what the policy admits goes straight to the trainer."""

    def __init__(self) -> None:
        config = build_run_config({"policy": {"approval": "auto", "rate_limit": 10_000, "max_pending": 1000}})
        self.bounds = config.policy.bounds()
        self.log = EventLog()
        self.sent: list[ApplyDirective] = []
        self.queue = DirectiveQueue(config, self.log, self._send)
        self.queue.latest = sample(5)

    def _send(self, message: Any) -> bool:
        self.sent.append(message)
        return True

    def assert_the_policy_held(self) -> None:
        for message in self.sent:
            for name, value in message.values.items():
                low, high = self.bounds[name]
                assert name in DIRECTIVE_FIELDS and low <= value <= high, (name, value)


async def ask(server: ChatServer, run: Run, *answers: Answer) -> list[Entry | None]:
    planner = OpenAIPlanner(server.url, "local-model", None, timeout_s=TIMEOUT_S)
    server.script = list(answers)
    out = []
    for _ in answers:
        out.append(
            hand_over(run.queue, planner.source, await planner.ask(TelemetrySummary().of(sample(5), {})))
        )
    return out


HOSTILE: dict[str, tuple[Answer, str]] = {
    "huge value": (Answer('{"lr_multiplier": 1e308}'), "lr_multiplier"),
    "string value": (Answer('{"lr_multiplier": "0.5"}'), "lr_multiplier"),
    "boolean": (Answer('{"micro_batch_size": true}'), "micro_batch_size"),
    "NaN": (Answer('{"gradient_clip_norm": NaN}'), "gradient_clip_norm"),
    "unknown field": (Answer('{"learning_rate": 10}'), "learning_rate"),
    "spoofed source": (Answer('{"source": "operator", "lr_multiplier": 0.5}'), "source"),
    "deep nesting": (Answer('{"lr_multiplier": ' + "[" * 5000 + "]" * 5000 + "}"), "not JSON"),
    "a list": (Answer("[0.5]"), "must be a JSON object"),
    "prose": (Answer("Lower the learning rate, I think."), "not JSON"),
    "evidence not a list": (Answer('{"lr_multiplier": 0.5, "evidence": "trust me"}'), "evidence"),
    "evidence too long": (Answer(json.dumps({"lr_multiplier": 0.5, "evidence": ["x" * 5000]})), "evidence"),
    "content not text": (Answer({"lr_multiplier": 0.5}), "not text"),
    "not a completion": (Answer(raw=b'{"id": "x"}'), "not a chat completion"),
    "body not JSON": (Answer(raw=b"<html>oops</html>"), "not a chat completion"),
    "rate limited": (Answer(raw=b"slow down", status=429), "HTTP 429"),
    "slow": (Answer('{"lr_multiplier": 0.5}', delay_s=TIMEOUT_S * 4), "no reply within"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_malformed_slow_and_hostile_answers_are_stored_rejections(
    server: ChatServer, case: str
) -> None:
    run = Run()
    answer, named = HOSTILE[case]
    (entry,) = await ask(server, run, answer)
    assert entry is not None and entry.state == "rejected"
    assert named in entry.view().reasons[0], entry.view().reasons
    assert run.sent == [] and run.queue.effective == {}
    decided = run.log.data_of("directive_decided")[-1]
    assert decided["directive"]["state"] == "rejected" and named in decided["directive"]["reasons"][0]


async def test_a_good_answer_is_clamped_into_the_bounds_with_its_evidence(server: ChatServer) -> None:
    run = Run()
    good = Answer(
        "```json\n"
        + json.dumps(
            {"lr_multiplier": 3.0, "rationale": "flat loss", "evidence": ["loss 2.31 for 400 steps"]}
        )
        + "\n```"
    )
    (entry,) = await ask(server, run, good)
    assert entry is not None and entry.state == "clamped"
    assert entry.view().evidence == ["loss 2.31 for 400 steps"]
    assert [m.values for m in run.sent] == [{"lr_multiplier": 0.85}]
    request = server.requests[-1]
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert json.loads(request["body"]["messages"][1]["content"])["step"] == 5


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
directive_like = st.dictionaries(
    st.sampled_from([*DIRECTIVE_FIELDS, "rationale", "evidence", "id", "step"]), json_values, max_size=5
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(directive_like, json_values), min_size=1, max_size=4))
def test_the_policy_holds_whatever_the_server_says(server: ChatServer, contents: list[Any]) -> None:
    run = Run()
    answers = [Answer(json.dumps(c) if i % 2 == 0 else c) for i, c in enumerate(contents)]
    entries = asyncio.run(ask(server, run, *answers))
    run.assert_the_policy_held()
    for entry in entries:
        if entry is not None and entry.state != "rejected":
            assert entry.verdict.patch and all(
                run.bounds[k][0] <= v <= run.bounds[k][1] for k, v in entry.verdict.patch.items()
            )


@pytest.mark.slow
async def test_the_example_command_planner_suggests_a_lower_lr_once_the_loss_stalls() -> None:
    run = Run()
    planner = CommandPlanner([sys.executable, str(EXAMPLE)], 10.0, run.log)
    try:
        replies = []
        for tick, loss in enumerate([3.0, 2.5, 2.49, 2.495, 2.5, 2.49]):
            summary = {"step": 50 * (tick + 1), "loss_smoothed": loss, "effective": {}}
            replies.append(await planner.ask(summary))
    finally:
        await planner.close()
    assert [r.values for r in replies[:5]] == [{}] * 5
    assert replies[5].values == {"lr_multiplier": 0.7} and "stalled" in replies[5].rationale
    assert replies[5].evidence[0] == "smoothed loss 2.49 at step 300"
    entry = hand_over(run.queue, planner.source, replies[5])
    assert entry is not None and entry.state == "approved" and entry.view().evidence == replies[5].evidence
    assert [m.values for m in run.sent] == [{"lr_multiplier": 0.7}]
