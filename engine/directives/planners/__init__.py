"""Planners: whatever suggests directives; every suggestion goes through the policy.

- ``rules``: the built-in rule planner reading telemetry (``rules.py``, pure);
- ``command``: a user's program speaking JSON lines on stdin/stdout (``command.py``), one
  reply per ask (``reply_lines.py``);
- ``openai``: an OpenAI-compatible chat-completions endpoint (``openai_http.py``), over
  an HTTP/1.1 exchange on the event loop with one deadline for all of it (``http_exchange.py``).

``factory.py`` builds the configured one; ``external.py`` paces the external ones and hands
their replies (parsed by ``reply.py``) to the directive queue; malformed, slow or hostile
output becomes a stored rejection.
"""
