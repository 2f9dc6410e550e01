"""``memtui serve``: the console in a browser, through textual-serve (the ``[serve]`` extra).

Each browser session runs its own ``memtui attach RUN`` (the same console, over a web driver)
as a child of this server, read-only unless ``--allow-actions``: anyone who can reach the
port can watch, and only an explicit flag lets them approve, stop or inject chaos. It binds
to 127.0.0.1 by default: reach it from a laptop through an SSH tunnel.
Imports stay lazy: ``memtui --help`` must not pay for aiohttp, and a missing extra is one
clear line, not a traceback.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from memtui.cli.arguments import add_run, add_theme
from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.run.directory import RunDir

DEFAULT_HOST = "127.0.0.1"
"""Loopback: the served console is reached through an SSH tunnel, not the open network."""
DEFAULT_PORT = 8000
MISSING_EXTRA = "memtui serve needs the serve extra: pip install 'memtui[serve]' (textual-serve)"


def port_number(text: str) -> int:
    """A TCP port, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {value}")
    return value


def public_url(text: str) -> str:
    """An http(s) URL with a host, without its trailing slash."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"not an http(s) URL like https://example.org/memtui: {text!r}")
    return text.rstrip("/")


def add_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve the console to a browser (read-only unless --allow-actions)",
        description=(
            "Serve the console on RUN over HTTP with textual-serve: every browser tab gets its "
            "own console. Read-only unless --allow-actions. Bound to 127.0.0.1 by default; from "
            "a laptop: ssh -L 9000:127.0.0.1:8000 HOST, then open http://127.0.0.1:9000 (any "
            "local port: the page's URLs are the ones the browser used, or a proxy's "
            "X-Forwarded-Host and -Proto). Ctrl-C stops the server and every console it "
            "started; the run goes on."
        ),
    )
    add_run(serve, "the newest live run")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    serve.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--public-url",
        type=public_url,
        default=None,
        metavar="URL",
        help="the address browsers reach the server by, when a proxy serves it under a path "
        "(https://example.org/memtui); default: each request's own",
    )
    serve.add_argument(
        "--allow-actions",
        action="store_true",
        help="let browser sessions change the run (approve, stop, chaos...); default read-only",
    )
    add_theme(serve)
    serve.set_defaults(handler=cmd_serve)


def session_command(run: RunDir, *, allow_actions: bool, theme: str | None) -> list[str]:
    """The console one browser session runs: this interpreter's ``memtui attach`` on ``run``."""
    command = [sys.executable, "-m", "memtui.cli", "attach", str(run.path)]
    if theme:
        command += ["--theme", theme]
    if not allow_actions:
        command.append("--readonly")
    return command


def cmd_serve(args: argparse.Namespace) -> int:
    from memtui.cli.resolver import require_run

    try:
        from memtui.cli.serve.console_server import serve_console
    except ImportError as err:
        raise CliError(f"{MISSING_EXTRA}; {err}") from None
    run = require_run(args.run, live=args.run is None)
    command = session_command(run, allow_actions=args.allow_actions, theme=args.theme)
    mode = "actions allowed" if args.allow_actions else "read-only"
    # exec: the shell textual-serve starts becomes the console, one process per session
    serve_console(
        "exec " + shlex.join(command),
        host=args.host,
        port=args.port,
        title=f"memtui {run.run_id} ({mode})",
        public_url=args.public_url,
    )
    return 0
