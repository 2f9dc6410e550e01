"""Planners: whatever suggests directives; every suggestion goes through the policy.

- ``rules``: the built-in rule planner reading telemetry (``rules.py``, pure);
- ``command``: a user's program speaking JSON lines on stdin/stdout (``command.py``);
- ``openai``: an OpenAI-compatible chat-completions endpoint (``openai_http.py``).

``factory.py`` builds the configured one; ``external.py`` paces the external ones and hands
their replies (parsed by ``reply.py``) to the directive queue; malformed, slow or hostile
output becomes a stored rejection.
"""
