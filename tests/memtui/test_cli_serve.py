"""``memtui serve`` without a browser: its help, the console each session runs (read-only
unless ``--allow-actions``), a checked port, and one clear line when the extra is missing."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

import pytest
from cli_harness import memtui

from engine.run.directory import RunDir
from memtui.cli.errors import CliError
from memtui.cli.main import main
from memtui.cli.serve import serve_command


def test_help_says_read_only_by_default_and_how_to_tunnel(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "Read-only unless --allow-actions" in shown
    assert "ssh -L 9000:127.0.0.1:8000" in shown and "X-Forwarded-Host" in shown
    assert "--host HOST" in shown and "--port PORT" in shown and "--public-url URL" in shown


def test_each_session_runs_a_read_only_attach_unless_actions_are_allowed(run_dir: RunDir) -> None:
    watched = serve_command.session_command(run_dir, allow_actions=False, theme=None)
    assert watched[:5] == [sys.executable, "-m", "memtui.cli", "attach", str(run_dir.path)]
    assert "--readonly" in watched
    allowed = serve_command.session_command(run_dir, allow_actions=True, theme="light")
    assert "--readonly" not in allowed
    assert allowed[-2:] == ["--theme", "light"]


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_a_port_outside_1_to_65535_is_refused_naming_it(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", port])
    assert exited.value.code == 2
    assert "--port" in capsys.readouterr().err


def test_without_the_extra_serve_says_how_to_install_it(
    live_run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "textual_serve", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)
    monkeypatch.delitem(sys.modules, "memtui.cli.serve.console_server", raising=False)
    args = argparse.Namespace(
        run=live_run.run_id, allow_actions=False, theme=None, host="127.0.0.1", port=8000
    )
    with pytest.raises(CliError, match=r"pip install 'memtui\[serve\]'"):
        serve_command.cmd_serve(args)


@pytest.mark.slow
def test_a_taken_port_is_one_line_naming_it(home: Path, live_run: RunDir) -> None:
    pytest.importorskip("textual_serve", reason="needs textual-serve (the [serve] extra)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = memtui(home, "serve", live_run.run_id, "--port", str(port))
    assert done.returncode == 1
    assert done.stderr.startswith(f"memtui: cannot serve on 127.0.0.1:{port}: "), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_a_transport_freed_after_the_loop_closed_prints_nothing_and_other_errors_still_do() -> None:
    """The one unraisable the served console drops: a session's process transport freed once
    the loop is closed. Anything else reaches the hook as before."""
    import asyncio.base_subprocess
    import types

    pytest.importorskip("textual_serve")
    from memtui.cli.serve.console_server import quiet_closed_transports

    heard: list[object] = []
    quiet = quiet_closed_transports(heard.append)
    freed = types.SimpleNamespace(
        object=asyncio.base_subprocess.BaseSubprocessTransport.__del__,
        exc_value=RuntimeError("Event loop is closed"),
    )
    quiet(freed)
    assert heard == []
    other = types.SimpleNamespace(object=print, exc_value=RuntimeError("Event loop is closed"))
    quiet(other)
    elsewhere = types.SimpleNamespace(object=freed.object, exc_value=ValueError("bad"))
    quiet(elsewhere)
    assert heard == [other, elsewhere]


@pytest.mark.parametrize(
    ("headers", "url"),
    [
        ({"Host": "127.0.0.1:9000"}, "http://127.0.0.1:9000"),  # an SSH tunnel's local port
        ({"Host": "gpu-box:8000"}, "http://gpu-box:8000"),  # --host 0.0.0.0, reached by name
        ({"Host": "[::1]:8000"}, "http://[::1]:8000"),
        (
            {"Host": "x", "X-Forwarded-Host": "ml.example.org", "X-Forwarded-Proto": "https"},
            "https://ml.example.org",
        ),
        ({"Host": "x", "X-Forwarded-Host": "a.example, b.internal"}, "http://a.example"),  # the first hop
        ({"Host": 'evil"><script>'}, "http://127.0.0.1:8000"),  # not a host: the bind address
        ({"Host": "h", "X-Forwarded-Proto": "javascript"}, "http://127.0.0.1:8000"),
    ],
)
def test_the_page_s_urls_are_the_ones_the_browser_used(headers: dict[str, str], url: str) -> None:
    pytest.importorskip("textual_serve", reason="needs textual-serve (the [serve] extra)")
    from aiohttp.test_utils import make_mocked_request

    from memtui.cli.serve.console_server import request_url

    assert request_url(make_mocked_request("GET", "/", headers=headers), "http://127.0.0.1:8000") == url


@pytest.mark.parametrize("text", ["example.org", "ftp://example.org", "https://", "https://h/?q=1"])
def test_a_public_url_that_is_not_http_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not an http"):
        serve_command.public_url(text)
    assert serve_command.public_url("https://example.org/memtui/") == "https://example.org/memtui"
