"""The endurance screen: ``memtui report``'s figures for the attached run, live.

The report is computed from the store (``memtui.endurance_reader``) in a worker thread when
the screen opens and every ``REFRESH_S`` while it is open; the screen shows the newest one.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Static

from engine.run.reports.endurance_report import EnduranceReport
from memtui.console.screens.modal import Modal
from memtui.endurance_markdown import figure_rows
from memtui.endurance_reader import EnduranceReader

REFRESH_S = 5.0
"""Seconds between two computations of the report while the screen is open."""


def render_endurance(report: EnduranceReport | None) -> str:
    """The figures as aligned ``name  value`` lines, then chaos by kind; markup."""
    if report is None:
        return "[$text-muted]reading the store…[/]"
    rows = figure_rows(report)
    width = max(len(name) for name, _ in rows)
    lines = [f"[$text-muted]{escape(name):<{width}}[/]  {escape(value)}" for name, value in rows]
    if report.chaos:
        lines += ["", "[b]chaos by kind[/b]  injected / recovered / failed / pending"]
        lines += [
            f"  {escape(kind):<20} {t.injected:>5} {t.recovered:>5} {t.failed:>5} {t.pending:>5}"
            for kind, t in report.chaos.items()
        ]
    return "\n".join(lines)


class EnduranceScreen(Modal[None]):
    """The run's endurance report, recomputed while open; esc closes."""

    DEFAULT_CSS = """
    EnduranceScreen > Vertical { width: 95%; max-width: 110; max-height: 90%; padding: 1 2; }
    """
    BINDINGS = [
        Binding("E", "close", "Close"),
        Binding("q", "close", "Close"),
    ]

    def __init__(self, reader: EnduranceReader) -> None:
        super().__init__()
        self._reader = reader
        self.report: EnduranceReport | None = None
        """The newest report read (None before the first)."""
        self._box = Vertical()

    def compose(self) -> ComposeResult:
        self._box.border_title = "Endurance"
        self._box.border_subtitle = "from the store · esc closes"
        with self._box, VerticalScroll():
            yield Static(render_endurance(None), id="endurance-figures")

    def on_mount(self) -> None:
        self.refresh_report()
        self.set_interval(REFRESH_S, self.refresh_report)

    def refresh_report(self) -> None:
        self.run_worker(self._read, thread=True, group="endurance", exclusive=True, exit_on_error=False)

    def _read(self) -> None:
        """Worker thread: compute the report, then show it on the app's loop."""
        report = self._reader.report()
        if report is not None:
            self.app.call_from_thread(self._show, report)

    def _show(self, report: EnduranceReport) -> None:
        self.report = report
        self.query_one("#endurance-figures", Static).update(render_endurance(report))
