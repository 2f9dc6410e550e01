"""The web server behind ``memtui serve``: textual-serve's ``Server``, saying where it is and
leaving no console behind when it stops.

Imported only by ``memtui serve``, and only with the ``[serve]`` extra installed (the import
of ``textual_serve`` here is what fails without it).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
from typing import Any

import psutil
from aiohttp import web
from textual_serve.server import Server

from memtui.cli.errors import CliError

CHILD_GRACE_S = 5.0
"""Seconds a browser session's console has to quit after the server stops, before SIGKILL."""


class ConsoleServer(Server):
    """textual-serve's server with one line on start instead of its banner, no line per
    request, and each session's console ended before aiohttp gives up on its handler."""

    def initialize_logging(self) -> None:
        super().initialize_logging()
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    async def on_startup(self, app: web.Application) -> None:
        print(f"serving {self.title} at {self.public_url} (Ctrl-C stops)", flush=True)

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.on_cleanup.append(self.on_cleanup)
        return app

    async def on_cleanup(self, app: web.Application) -> None:
        """The sessions are over: free their process transports now, while the loop runs
        (textual-serve never closes them; freed after the loop closes, each prints a traceback)."""
        gc.collect()

    async def on_shutdown(self, app: web.Application) -> None:
        """Stopping: SIGTERM to every session's console. Each session's handler then sees its
        process end and closes its websocket itself, on a loop that is still running (left
        to aiohttp, the handlers are cancelled and the processes outlive the loop)."""
        terminate_children()


def serve_console(command: str, *, host: str, port: int, title: str) -> None:
    """Serve ``command`` (a shell line, one process per browser session) on ``host:port``
    until SIGINT or SIGTERM; then stop every session's process."""
    server = ConsoleServer(command, host=host, port=port, title=title)
    sys.unraisablehook = quiet_closed_transports(sys.unraisablehook)
    try:
        server.serve()
    except OSError as err:  # the address is taken or cannot be bound
        raise CliError(f"cannot serve on {host}:{port}: {err.strerror or err}") from None
    finally:
        stop_children()


def quiet_closed_transports(hook: Any) -> Any:
    """``sys.unraisablehook`` that drops one known message and passes every other on: a
    session's process transport that a handler still held when ``on_cleanup`` collected
    (seen on a loaded machine) is freed after the loop closed, and its ``__del__`` then
    fails to close it ("Event loop is closed"). Its process was already stopped
    (``terminate_children``); there is nothing left to close, and no traceback to print."""

    def quiet(unraisable: Any) -> None:
        where = getattr(unraisable.object, "__qualname__", "")
        closed = isinstance(unraisable.exc_value, RuntimeError) and "Event loop is closed" in str(
            unraisable.exc_value
        )
        if not (closed and where == "BaseSubprocessTransport.__del__"):
            hook(unraisable)

    return quiet


def terminate_children() -> list[psutil.Process]:
    """SIGTERM to every process this one started that is still there; those processes."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    return children


def stop_children() -> None:
    """``terminate_children``, then SIGKILL to any still there after a grace."""
    children = terminate_children()
    _, alive = psutil.wait_procs(children, timeout=CHILD_GRACE_S)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
