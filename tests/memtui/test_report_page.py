"""``memtui report --html``: one self-contained page whose marks are the run's events (read
back from the page's SVG), whose tables are the Markdown report's, and whose curves stay a
few thousand points however long the run."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.cli.main import main
from memtui.report_page import CHARTS
from memtui.run_series import BUCKETS
from memtui.svg_chart import LEFT, RIGHT, WIDTH
from tests.fakes.run_script import make_sample
from tests.memtui.stored_runs import T0, stored_run

EXPECTED_MARKS = {
    "run_started": ("restart", 34, "run resumed"),  # after a whole-tree death
    "chaos_injected": ("chaos", 20, "chaos kill"),
    "memory_adapted": ("oom", 25, "OOM: micro-batch 8 -> 4"),
    "trainer_restarted": ("restart", 40, "trainer restarted"),
    "directive_applied": ("directive", 41, "lr x0.5"),
    "rolled_back": ("rollback", 56, "rolled back to global_step30"),
}
"""Event type -> (mark kind, the step stored before it, its message): stored_runs' events."""


class _PageReader(HTMLParser):
    """The page's marks (attributes and tooltip), polylines, cells and any outside reference."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[dict[str, str]] = []
        self.polylines: list[int] = []
        self.cells: list[str] = []
        self.references: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.references += [v for k, v in a.items() if k in ("src", "href")]
        if tag == "line" and "mark" in a.get("class", "").split():
            self.marks.append(a)
        elif tag == "polyline":
            self.polylines.append(len(a["points"].split()))
        self._in = tag

    def handle_data(self, data: str) -> None:
        if self._in == "title" and self.marks and "title" not in self.marks[-1]:
            self.marks[-1]["title"] = data
        elif self._in in ("td", "th"):
            self.cells.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._in = None


def _page(run: RunDir, tmp_path: Path) -> tuple[str, _PageReader]:
    out = tmp_path / "report.html"
    assert main(["report", run.run_id, "--html", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    reader = _PageReader()
    reader.feed(text)
    return text, reader


def test_the_marks_are_the_runs_events(home: Path, tmp_path: Path) -> None:
    shown = stored_run(home)
    _, page = _page(shown.run, tmp_path)
    assert len(page.marks) == len(CHARTS) * len(shown.marked)  # every chart marks every one
    for chart in range(len(CHARTS)):
        marks = page.marks[chart * len(shown.marked) : (chart + 1) * len(shown.marked)]
        assert [int(m["data-seq"]) for m in marks] == list(shown.marked)
        for mark, event_type in zip(marks, shown.marked.values(), strict=True):
            kind, step, message = EXPECTED_MARKS[event_type]
            assert mark["data-kind"] == kind and f"mark-{kind}" in mark["class"]
            assert mark["title"].startswith(f"{kind} at step {step},") and mark["title"].endswith(message)
        xs = [float(m["x1"]) for m in marks]
        assert xs == sorted(xs) and xs[0] >= LEFT and xs[-1] <= WIDTH - RIGHT  # in time order, on the axis
    # not marked: the shrink, the checkpoint, the re-sent directive, the eval
    assert not any("shrink" in m["title"] or "re-sent" in m["title"] for m in page.marks)


def test_the_page_holds_the_reports_tables_and_nothing_from_outside(home: Path, tmp_path: Path) -> None:
    shown = stored_run(home)
    text, page = _page(shown.run, tmp_path)
    at = page.cells.index("steps sustained / target")
    assert page.cells[at : at + 2] == ["steps sustained / target", "60 / 100"]
    assert "global_step30" in page.cells  # the rollbacks table
    assert (
        page.references == [] and "<script" not in text and not re.search(r"https?://(?!www\.w3\.org)", text)
    )
    assert main(["report", shown.run.run_id, "--html", str(tmp_path / "x.html"), "--json"]) == 2


def _fill(run: RunDir, rows: int) -> None:
    """``rows`` step samples copied in SQL (seconds for 100,000), a loss that falls with spikes."""
    with Store(run.store) as store:
        store.add_step(make_sample(1, ts=T0 + 1, mem_budget=2**30))
    db = sqlite3.connect(run.store)
    cols = [r[1] for r in db.execute("PRAGMA table_info(steps)") if r[1] != "id"]
    exprs = {"step": "n.x", "ts": f"{T0} + n.x * 0.5", "loss": "5.0 - n.x / 50000.0 + (n.x % 997 = 0)"}
    select = ", ".join(exprs.get(c, c) for c in cols)
    db.execute(
        f"WITH RECURSIVE n(x) AS (SELECT 2 UNION ALL SELECT x + 1 FROM n WHERE x < {rows}) "
        f"INSERT INTO steps ({', '.join(cols)}) SELECT {select} FROM steps, n"
    )
    db.commit()
    db.close()


@pytest.mark.timeout(120)
def test_a_long_run_is_downsampled(home: Path, tmp_path: Path) -> None:
    run = RunDir.create(build_run_config(name="long", steps=100_000), home)
    _fill(run, 100_000)
    text, page = _page(run, tmp_path)
    assert page.polylines and max(page.polylines) <= 2 * BUCKETS
    assert len(text.encode()) < 400_000  # bytes: a page a mail or a browser takes at once
    assert "100,000 step samples stored" in text and "step 100,000" in text


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow  # a headless Chromium
@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on this machine")
@pytest.mark.timeout(120)
def test_a_browser_reads_the_same_marks(home: Path, tmp_path: Path) -> None:
    """Headless Chromium opens the page offline: the DOM it built holds every mark, and it
    draws a screenshot."""
    shown = stored_run(home)
    _, page = _page(shown.run, tmp_path)
    url = (tmp_path / "report.html").as_uri()
    flags = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=90, check=True)
    seen = _PageReader()
    seen.feed(dom.stdout)
    assert [m["data-seq"] for m in seen.marks] == [m["data-seq"] for m in page.marks]
    shot = tmp_path / "report.png"
    subprocess.run([*flags, "--window-size=1050,2400", f"--screenshot={shot}", url], capture_output=True,
                   timeout=90, check=True)  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
