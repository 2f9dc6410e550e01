"""``memtui serve`` in a real headless Chromium: the served console of a live run (the real
supervisor, the torch-free fake trainer) shows its step advancing, stays read-only without
``--allow-actions``, and Ctrl-C (SIGINT) stops the server with no console left behind.

Needs Debian's Chromium at /usr/bin/chromium (``apt-get install -y chromium``) and the
``[serve]`` and ``[test]`` extras (textual-serve, playwright, which drives that Chromium:
``playwright install`` is never needed). Without Chromium the test skips and says so.
MEMTUI_SCREENSHOTS=DIR keeps the screenshot there (default: the test's tmp_path).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_harness import MEMTUI, cli_environment, memtui, throwaway_home

from engine.run.directory import RunDir
from engine.run.reports.status import offline_status
from memtui.console.widgets.run_header import CONNECTION_LABELS
from tests.waiting import wait_for

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's Chromium at /usr/bin/chromium: apt-get install -y chromium",
    ),
]
playwright = pytest.importorskip("playwright.sync_api", reason="needs playwright (the [test] extra)")
pytest.importorskip("textual_serve", reason="needs textual-serve (the [serve] extra)")
psutil = pytest.importorskip("psutil")

FAKE_TRAINER = Path(__file__).resolve().parent / "fakes" / "fake_trainer.py"
ENV = {
    "MEMTUI_TRAINER_CMD": f"{sys.executable} {FAKE_TRAINER}",
    "FAKE_TRAINER_STEPS": "1000000",
    "FAKE_TRAINER_RATE_HZ": "5",  # steps/s: slow enough to read one step twice, cheap on CPU
}
TERMINAL_HOOK = "new w(e,{ping:r});"
"""Where textual-serve's page makes its terminal; the test exposes it as window.memtuiTerminal
(the page keeps it in a closure) to read what the terminal shows."""
SCREEN_TEXT = """() => {
  const t = window.memtuiTerminal && window.memtuiTerminal.terminal;
  if (!t) return "";
  const buffer = t.buffer.active, lines = [];
  for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
  return lines.join("\\n");
}"""
STEP = re.compile(r"\bstep (\d+)")
LIVE = CONNECTION_LABELS["connected"][0]
"""The header's mark of a console connected to the live run: only then does its footer offer
the run's actions (or, read-only, leave them out)."""


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtsv")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_run(home: Path) -> RunDir:
    started = memtui(home, "run", "--preset", "tiny", "--name", "served", "--detach", "--json", env=ENV)
    assert started.returncode == 0, started.stderr
    run = RunDir(Path(json.loads(started.stdout)["run_dir"]))
    wait_for(lambda: offline_status(run).step > 0, what="the first step", seen=lambda: offline_status(run))
    return run


def expose_terminal(route: Any) -> None:
    page_script = route.fetch().text()
    assert TERMINAL_HOOK in page_script, "textual-serve's page changed: update TERMINAL_HOOK"
    hooked = page_script.replace(TERMINAL_HOOK, TERMINAL_HOOK + "window.memtuiTerminal=t;")
    route.fulfill(body=hooked, content_type="application/javascript")


def shown_step(page: Any) -> int:
    """The step the served console shows (its header is the first line that names one)."""
    match = STEP.search(page.evaluate(SCREEN_TEXT))
    assert match, page.evaluate(SCREEN_TEXT)
    return int(match.group(1))


def step_after(page: Any, step: int) -> int:
    """Wait until the served console shows a step beyond ``step``; that step."""
    page.wait_for_function(
        f"(() => {{ const m = ({SCREEN_TEXT})().match(/\\bstep (\\d+)/); return m && +m[1] > {step}; }})()",
        timeout=60_000,
    )
    return shown_step(page)


class Forwarder:
    """A TCP port forwarded to ``127.0.0.1:target``, as ``ssh -L`` makes one: each connection
    is piped both ways; the first bytes of each are kept (its request line and headers)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.openings: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target))
                threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
                threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, keep: bool) -> None:
        with contextlib.suppress(OSError):
            first = True
            while data := source.recv(65536):
                if keep and first:
                    self.openings.append(data[:2048])
                first = False
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def upgraded(self) -> bool:
        """A websocket was opened through this port."""
        return any(b"upgrade: websocket" in opening.lower() for opening in self.openings)

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def served(
    home: Path, run: RunDir, *flags: str, forward: bool = False
) -> Iterator[tuple[subprocess.Popen[str], Any]]:
    """``memtui serve RUN FLAGS`` and a headless Chromium page on it, showing a step; the
    server is killed after, if the test has not stopped it. ``forward``: the page is opened
    through a forwarded port under another host name (``localhost:OTHER``), as a laptop
    reaches it through an SSH tunnel; the forwarder is the page's ``memtui_forwarder``."""
    port = free_port()
    server = subprocess.Popen(
        [MEMTUI, "serve", run.run_id, "--port", str(port), *flags],
        env=cli_environment(home),
        start_new_session=True,  # its own group, as a terminal's foreground job
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        said = server.stdout.readline()
        assert f"http://127.0.0.1:{port}" in said, said
        with playwright.sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.route("**/static/js/textual.js", expose_terminal)
            forwarder = Forwarder(port) if forward else None
            page.memtui_forwarder = forwarder
            page.goto(f"http://localhost:{forwarder.port}/" if forwarder else f"http://127.0.0.1:{port}/")
            step_after(page, -1)
            page.wait_for_function(f"({SCREEN_TEXT})().includes({json.dumps(LIVE)})", timeout=60_000)
            # A person's page has the focus; a headless one is blurred, and Textual's footer
            # lists keys only while its app has the focus: give it, then read the footer.
            page.locator("textarea").first.focus()
            page.wait_for_function(f"({SCREEN_TEXT})().includes('Detach')", timeout=60_000)
            yield server, page
            browser.close()
            if forwarder:
                forwarder.close()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def stop_cleanly(server: subprocess.Popen[str], interrupt: Callable[[], None]) -> None:
    """``interrupt`` the server: it exits 0, says no traceback and leaves no console behind."""
    consoles = psutil.Process(server.pid).children(recursive=True)
    assert consoles, "no console was started for the browser session"
    interrupt()
    assert server.wait(timeout=60) == 0
    assert server.stderr is not None
    assert "Traceback" not in server.stderr.read()  # stopped, not torn down
    assert not [c for c in consoles if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def test_served_console_shows_the_live_step_advancing_read_only(home: Path, tmp_path: Path) -> None:
    run = start_run(home)
    shots = Path(os.environ.get("MEMTUI_SCREENSHOTS", tmp_path))
    with served(home, run) as (server, page):
        first = shown_step(page)
        second = step_after(page, first)
        print(f"the served console showed step {first}, then step {second}")
        text = page.evaluate(SCREEN_TEXT)
        assert "read-only" in text and "Stop run" not in text, text  # the footer offers no stop
        page.keyboard.press("s")  # the stop key: refused in a read-only console
        step_after(page, second)
        assert offline_status(run).state == "running"
        page.screenshot(path=str(shots / "memtui-serve-console.png"))
        stop_cleanly(server, lambda: server.send_signal(signal.SIGINT))  # the server alone
    assert offline_status(run).state == "running"  # the run goes on without its viewers


def test_allow_actions_serves_a_console_that_offers_them(home: Path) -> None:
    run = start_run(home)
    with served(home, run, "--allow-actions") as (server, page):
        text = page.evaluate(SCREEN_TEXT)
        assert "Stop run" in text and "read-only" not in text, text
        # Ctrl-C in a terminal: SIGINT to the whole foreground group, the consoles too
        stop_cleanly(server, lambda: os.killpg(server.pid, signal.SIGINT))


def test_a_forwarded_port_under_another_host_name_reaches_the_console(home: Path) -> None:
    """``ssh -L 9000:127.0.0.1:8000``: the page comes through the tunnel's port, and so must its
    websocket (textual-serve wrote the bind address into the page: ws://127.0.0.1:8000/ws)."""
    run = start_run(home)
    with served(home, run, forward=True) as (server, page):
        forwarder: Forwarder = page.memtui_forwarder
        assert forwarder.upgraded(), [o[:80] for o in forwarder.openings]  # the websocket came through it
        html = page.content()
        assert f"ws://localhost:{forwarder.port}/ws" in html and f"127.0.0.1:{forwarder.target}" not in html
        first = shown_step(page)
        assert step_after(page, first) > first  # live through the tunnel
        stop_cleanly(server, lambda: server.send_signal(signal.SIGINT))
