"""The one failure every ``memtui`` command raises: ``main`` prints it as one line on stderr,
``memtui: <message>``, and exits with its ``code``.

Torch-free and import-free, so the parser and every command module can use it cheaply.
"""

from __future__ import annotations


class CliError(Exception):
    """A failure reported as one line ``memtui: <message>``; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
