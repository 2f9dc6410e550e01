"""The command palette's provider: every console command by name (ctrl+p).

The app lists its commands (``palette_commands``: title, help, action); read-only
consoles list none of the operator actions. Choosing one runs the action, so it asks for
confirmation exactly as its key does.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider


class ConsoleCommands(Provider):
    """Directives, chaos, panels, export and theme commands."""

    def _commands(self) -> list[tuple[str, str, str]]:
        app: Any = self.app  # MemtuiApp; typed loosely to keep this module free of app imports
        return app.palette_commands() if hasattr(app, "palette_commands") else []

    async def discover(self) -> Hits:
        for title, help_text, action in self._commands():
            yield DiscoveryHit(title, partial(self.app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, action in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(title), partial(self.app.run_action, action), help=help_text
                )
