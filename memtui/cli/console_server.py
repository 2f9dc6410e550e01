"""The web server behind ``memtui serve``: textual-serve's ``Server``, saying where it is and
leaving no console behind when it stops.

Imported only by ``memtui serve``, and only with the ``[serve]`` extra installed (the import
of ``textual_serve`` here is what fails without it).
"""

from __future__ import annotations

import contextlib

import psutil
from aiohttp import web
from textual_serve.server import Server

from memtui.cli.errors import CliError

CHILD_GRACE_S = 5.0
"""Seconds a browser session's console has to quit after the server stops, before SIGKILL."""


class ConsoleServer(Server):
    """textual-serve's server with one line on start instead of its banner."""

    async def on_startup(self, app: web.Application) -> None:
        print(f"serving {self.title} at {self.public_url} (Ctrl-C stops)", flush=True)


def serve_console(command: str, *, host: str, port: int, title: str) -> None:
    """Serve ``command`` (a shell line, one process per browser session) on ``host:port``
    until SIGINT or SIGTERM; then stop every session's process."""
    server = ConsoleServer(command, host=host, port=port, title=title)
    try:
        server.serve()
    except OSError as err:  # the address is taken or cannot be bound
        raise CliError(f"cannot serve on {host}:{port}: {err.strerror or err}") from None
    finally:
        stop_children()


def stop_children() -> None:
    """SIGTERM to every process this one started that is still there, SIGKILL after a grace."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=CHILD_GRACE_S)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
