"""A planner that is an OpenAI-compatible chat-completions endpoint.

Per tick it POSTs the telemetry summary to ``{base_url}/chat/completions`` with a system
prompt asking for exactly one JSON object (the directive fields to change and a rationale,
or ``{}``), and reads the first choice's message content as that object (see
engine.directives.planners.reply). The HTTP exchange runs on the event loop
(``engine.directives.planners.http_exchange``, no thread) under ONE deadline of
``timeout_s`` for all of it: connect, TLS, request, headers and body, however slowly the
bytes come. When it passes, the connection is aborted and the ask is refused; nothing of
it lives on, so a stuck endpoint costs its own ask and nothing else. No reply in time, a
connection or HTTP error, or a body over ``MAX_BODY_BYTES`` is a failed ask (the driver
backs off a planner that keeps failing); a body that is not a chat completion, or content
that is not one JSON object, is an answer refused with a reason. ``ask`` never raises. The
API key is read from the named environment variable at each request and never stored or
logged. Torch-free.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from engine.directives.planners.http_exchange import HttpError, post
from engine.directives.planners.reply import PlannerReply, parse_reply, refused, unanswered

MAX_BODY_BYTES = 1 << 20  # of an HTTP reply; a chat completion with one object is ~1 KiB
SHOWN_CHARS = 200  # of an error body quoted in its reason

SYSTEM_PROMPT = """\
You tune the hyperparameters of a running training job. You get one JSON object of \
telemetry (step, loss, loss_smoothed, lr, grad_norm, loss_scale, overflow counts, memory \
in bytes per rank, micro_batch, grad_accum, and the directive values already in effect).
Answer with exactly one JSON object and nothing else. Its keys may be any of:
  lr_multiplier (a factor on the configured learning-rate schedule, not compounding),
  gradient_clip_norm (a global L2 norm), loss_scale_initial_power (an integer: the fp16 \
loss scale restarts at 2**this), micro_batch_size (an integer, samples per micro-batch),
  rationale (a short string saying why).
Answer {} when nothing should change. A local policy clamps or rejects whatever you suggest."""


class OpenAIPlanner:
    """``model`` at an OpenAI-compatible ``base_url`` (e.g. http://127.0.0.1:8000/v1)."""

    def __init__(self, base_url: str, model: str, api_key_env: str | None, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.source = f"http:{model}"[:128]

    async def ask(self, summary: dict[str, Any]) -> PlannerReply:
        body = json.dumps(self.request(summary), allow_nan=False).encode()
        try:
            exchange = post(self.base_url + "/chat/completions", body, self._headers(), MAX_BODY_BYTES)
            reply = await asyncio.wait_for(exchange, self.timeout_s)  # all of it, a slow body included
        except TimeoutError:
            return unanswered(f"no reply within {self.timeout_s:g} s (the deadline for the whole exchange)")
        except HttpError as err:
            return unanswered(f"request failed: {err}"[:500])
        text = reply.body.decode("utf-8", errors="replace")
        if reply.status != 200:
            return unanswered(f"HTTP {reply.status}: {text[:SHOWN_CHARS]!r}")
        return content_reply(text)

    async def close(self) -> None:
        return None  # one connection per request: nothing held

    def request(self, summary: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": json.dumps(summary, allow_nan=False)},
            ],
        }

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env or "", "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers


def content_reply(text: str) -> PlannerReply:
    """A chat-completions body: its first choice's message content, parsed as a reply."""
    try:
        body = json.loads(text)
        content = body["choices"][0]["message"]["content"]
    except (ValueError, RecursionError, KeyError, IndexError, TypeError):
        return refused(f"not a chat completion: {text[:SHOWN_CHARS]!r}")
    if not isinstance(content, str):
        return refused(f"message content is {type(content).__name__}, not text")
    return parse_reply(content)
