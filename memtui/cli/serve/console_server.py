"""The web server behind ``memtui serve``: textual-serve's ``Server``, saying where it is and
leaving no console behind when it stops.

Imported only by ``memtui serve``, and only with the ``[serve]`` extra installed (the import
of ``textual_serve`` here is what fails without it).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import sys
from typing import Any

import psutil
from aiohttp import web
from textual_serve.server import Server

from memtui.cli.errors import CliError

CHILD_GRACE_S = 5.0
"""Seconds a browser session's console has to quit after the server stops, before SIGKILL."""


HOST = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
"""A Host header we put back into the page: a name or an IPv4/bracketed IPv6 address, and a port."""


def request_url(request: web.Request, fallback: str) -> str:
    """The address the browser reached us by, for the page's asset and websocket URLs: a
    proxy's ``X-Forwarded-Proto``/``X-Forwarded-Host`` (first hop) when it sets them, else the
    request's own scheme and ``Host`` (an SSH tunnel's local port: ``127.0.0.1:9000``). A host
    that is not a plain name or address gives ``fallback``: it goes back into the page.
    Only that same browser gets the URL, so a client choosing its own Host changes its page only."""
    headers = request.headers
    host = headers.get("X-Forwarded-Host", request.host).split(",")[0].strip()
    scheme = headers.get("X-Forwarded-Proto", request.scheme).split(",")[0].strip().lower()
    if not HOST.fullmatch(host) or scheme not in ("http", "https"):
        return fallback
    return f"{scheme}://{host}"


class ConsoleServer(Server):
    """textual-serve's server with one line on start instead of its banner, no line per
    request, each session's console ended before aiohttp gives up on its handler, and the
    page's URLs those of the request (textual-serve writes the bind address into them:
    ``--host 0.0.0.0`` gave ``ws://0.0.0.0:PORT/ws``, and a tunnel's other port broke them)
    unless an operator gave ``public_url``."""

    def __init__(self, command: str, *, host: str, port: int, title: str, public_url: str | None) -> None:
        super().__init__(command, host=host, port=port, title=title, public_url=public_url)
        self.bound_url = self.public_url
        self.fixed_url = public_url

    async def handle_index(self, request: web.Request) -> Any:
        # textual-serve builds the page from self.public_url without awaiting in between, so
        # setting it here serves this request alone (one event loop, no other handler runs).
        self.public_url = self.fixed_url or request_url(request, self.bound_url)
        return await super().handle_index(request)

    def initialize_logging(self) -> None:
        super().initialize_logging()
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    async def on_startup(self, app: web.Application) -> None:
        where = self.fixed_url or self.bound_url
        print(f"serving {self.title} at {where} (Ctrl-C stops)", flush=True)

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


def serve_console(command: str, *, host: str, port: int, title: str, public_url: str | None = None) -> None:
    """Serve ``command`` (a shell line, one process per browser session) on ``host:port``
    until SIGINT or SIGTERM; then stop every session's process. ``public_url``: the address
    browsers use, when a proxy serves us under another one (default: each request's own)."""
    server = ConsoleServer(command, host=host, port=port, title=title, public_url=public_url)
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
