"""The run's checkpoints: tag, step, size, age and whether each verifies against its manifest.

Read off the event loop, in a worker thread: a quick pass (manifests and sizes) shows at
once, then a full pass (sha256 of every file) replaces it. The list is read again whenever
a checkpoint event arrives (``RunView.checkpoint_seq`` moves on), checked once a second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Static
from textual.worker import get_current_worker

from engine.domain import Event
from engine.events import CheckpointSaved
from engine.run.directory import RunDir
from memtui.checkpoint_report import PASSES, Check, checkpoint_rows
from memtui.console.run_view import RunView
from memtui.console.screens.modal import Modal
from memtui.formatting import format_age, format_bytes

STATE_STYLES: dict[str, str] = {
    "verified": "$text-success",
    "checked": "$text",
    "staging": "$text-warning",
    "pruning": "$text-muted",
    "unreadable": "$text-error",
    "half-written": "$text-error",
    "corrupt": "$text-error",
}
POLL_S = 1.0
"""How often the screen looks for a new checkpoint event in the app's view."""


def render_checkpoint_list(rows: Sequence[dict[str, Any]], check: Check | None) -> str:
    """One line per checkpoint, newest first, its state coloured; ``check`` is the pass shown."""
    if check is None:
        return "[$text-muted]reading the checkpoints…[/]"
    if not rows:
        return "[$text-muted]no checkpoints yet[/]"
    tag_w = max(3, *(len(r["tag"]) for r in rows))
    lines = [f"[$text-muted]{'TAG':<{tag_w}}  {'STEP':>7}  {'SIZE':>10}  {'AGE':>12}  STATE[/]"]
    lines += [_row(r, tag_w) for r in rows]
    if check == "quick":
        lines += ["", "[$text-muted]verifying checksums…[/]"]
    return "\n".join(lines)


def render_last_save(event: Event | None) -> str:
    """How the newest save went: what it cost training (ms), and where it was sealed."""
    if event is None:
        return "[$text-muted]no save this session yet[/]"
    saved = CheckpointSaved.of(event)
    if saved is None:  # checkpoint_failed or checkpoint_skipped: its message says why
        step = event.data.get("step", "?")
        return f"[$text-error]last save (step {step}): {escape(event.message)}[/]"
    if saved.reconciled:
        return f"[$text-muted]last save (step {saved.step}): sealed, never announced; found at a restart[/]"
    where = "in the background" if saved.background else "in line"
    return (
        f"[$text-muted]last save (step {saved.step}): training waited "
        f"{_ms(saved.seconds)}; written in {_ms(saved.write_s)}, "
        f"sealed {where} in {_ms(saved.seal_s)}[/]"
    )


def _ms(seconds: float | None) -> str:
    return "? ms" if seconds is None else f"{seconds * 1000:.0f} ms"


def _row(r: dict[str, Any], tag_w: int) -> str:
    style = STATE_STYLES.get(r["state"], "$text")
    problem = f": {r['problem']}" if r["problem"] and r["state"] != "staging" else ""
    latest = "  [b $text-accent]latest[/]" if r["latest"] else ""
    return (
        f"{escape(r['tag']):<{tag_w}}  {r['step']:>7}  {format_bytes(r['size_bytes']):>10}"
        f"  {format_age(r['age_s']):>12}  [{style}]{escape(r['state'] + problem)}[/]{latest}"
    )


class CheckpointsScreen(Modal[None]):
    """Every checkpoint of the run; esc closes, r reads them again."""

    DEFAULT_CSS = """
    CheckpointsScreen > Vertical { width: auto; min-width: 60; }
    CheckpointsScreen VerticalScroll { width: auto; }
    CheckpointsScreen #checkpoint-list { width: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    CheckpointsScreen #last-save { width: auto; margin-top: 1; }
    """
    BINDINGS = [
        Binding("C", "close", "Close"),
        Binding("r", "reload", "Read again"),
    ]

    def __init__(self, run: RunDir, view: Callable[[], RunView], clock: Callable[[], float]) -> None:
        """``view`` returns the app's newest view; ``clock`` is Unix time (for the ages)."""
        super().__init__()
        self.run = run
        self._view = view
        self._clock = clock
        self._seq = -1
        self.check: Check | None = None
        """The pass the list on screen came from; None until the first is read."""

    def compose(self) -> ComposeResult:
        with Vertical() as box, VerticalScroll():
            box.border_title = f"Checkpoints · {self.run.run_id}"
            box.border_subtitle = "esc closes · r reads again"  # on the border: never scrolled away
            yield Static(render_checkpoint_list([], None), id="checkpoint-list")
            yield Static(render_last_save(self._view().last_save), id="last-save")

    def on_mount(self) -> None:
        self.action_reload()
        self.set_interval(POLL_S, self._poll)

    def _poll(self) -> None:
        if self._view().checkpoint_seq != self._seq:
            self.action_reload()
        self.query_one("#last-save", Static).update(render_last_save(self._view().last_save))

    def action_reload(self) -> None:
        self._seq = self._view().checkpoint_seq
        self.run_worker(self._read, thread=True, group="checkpoints", exclusive=True, exit_on_error=False)

    def _read(self) -> None:
        """Worker thread: a quick pass, then a full one, each shown as it completes."""
        worker = get_current_worker()
        for check in PASSES:
            try:
                rows = checkpoint_rows(self.run, self._clock(), check)
            except Exception as err:  # e.g. a tag pruned while we read it: the next event reads again
                message = f"cannot read the checkpoints: {err}"
                self.app.call_from_thread(self.notify, message, severity="warning")
                return
            if worker.is_cancelled:
                return
            self.app.call_from_thread(self._show, rows, check)

    def _show(self, rows: list[dict[str, Any]], check: Check) -> None:
        self.check = check
        self.query_one("#checkpoint-list", Static).update(render_checkpoint_list(rows, check))
