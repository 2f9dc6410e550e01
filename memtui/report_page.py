"""The endurance report as one self-contained HTML page: the Markdown report's tables
(``endurance_markdown`` says what they hold; this only turns them into HTML) and the run's
curves (``CHARTS``) with its marks, drawn as inline SVG.

Pure: a report and its ``RunSeries`` in, text out. No script, no font or stylesheet
fetched: the page opens the same offline. Torch-free.
"""

from __future__ import annotations

from html import escape

from engine.run.reports.endurance_report import EnduranceReport
from memtui.endurance_markdown import render_markdown
from memtui.run_series import BUCKETS, EVAL_LOSS, MARK_KINDS, RunSeries
from memtui.svg_chart import Chart, render_chart

CHARTS: tuple[Chart, ...] = (
    # log: a chaos spike multiplies one step's loss by 1000; on a linear axis the rest of the
    # curve is a flat line at the bottom
    Chart("Loss (train and eval, log scale)", ("loss", EVAL_LOSS), dots=(EVAL_LOSS,), log=True),
    Chart("Throughput (tokens/s)", ("tokens/s",)),
    # the budget: on a CPU run the host's RAM, far above what the run holds
    Chart("Memory", ("allocated", "reserved", "budget"), unit="bytes", bounds=("budget",)),
    Chart("Loss scale (fp16)", ("loss scale",), log=True),
)
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 1000px; color: #222; }
table { border-collapse: collapse; margin: 8px 0 20px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f2f2f2; }
.chart { display: block; margin: 4px 0 18px; }
.frame { fill: #fcfcfc; stroke: #bbb; }
.tick { font-size: 11px; fill: #555; }
.series polyline { fill: none; stroke-width: 1.4; }
.series-0 { stroke: #1f77b4; fill: #1f77b4; } .series-1 { stroke: #d62728; fill: #d62728; }
.series-2 { stroke: #2ca02c; fill: #2ca02c; }
.legend { font-size: 12px; stroke: none; }
.mark { stroke-width: 2; opacity: 0.55; } .mark:hover { stroke-width: 5; opacity: 1; }
.mark-chaos { stroke: #ff7f0e; } .mark-restart { stroke: #9467bd; } .mark-oom { stroke: #d62728; }
.mark-rollback { stroke: #8c564b; } .mark-directive { stroke: #17becf; }
.key span { margin-right: 14px; } .key b { font-size: 16px; }
"""
KEY_COLOURS = {
    "chaos": "#ff7f0e",
    "restart": "#9467bd",
    "oom": "#d62728",
    "rollback": "#8c564b",
    "directive": "#17becf",
}
"""The marks' colours in the legend above the charts (the same as STYLE's)."""


def markdown_to_html(text: str) -> str:
    """The report's Markdown (headings, pipe tables, lines of text) as HTML, every cell escaped."""
    out: list[str] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                rows.append(cells)
            continue
        if rows:
            out.append(_table(rows))
            rows = []
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 4)
            out.append(f"<h{level}>{escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            out.append(f"<p>{escape(line)}</p>")
    return "\n".join(out)


def _table(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _key(run: RunSeries) -> str:
    counts = {kind.label: sum(1 for m in run.marks if m.kind == kind.label) for kind in MARK_KINDS}
    spans = [
        f'<span><b style="color:{KEY_COLOURS[label]}">|</b> {label} ({n})</span>'
        for label, n in counts.items()
    ]
    return f'<p class="key">Marked on every chart (hover for the event): {" ".join(spans)}</p>'


def render_page(report: EnduranceReport, run: RunSeries) -> str:
    """The whole page (one HTML document, ends with a newline)."""
    title = f"Endurance report: {report.name} ({report.run_id})"
    charts = "\n".join(f"<h3>{escape(c.title)}</h3>\n{render_chart(run, c)}" for c in CHARTS)
    note = (
        f"{run.steps_stored:,} step samples stored (every attempt's), drawn as each of {BUCKETS} time "
        "buckets' lowest and highest point. Bottom axis: wall time since the first step; top axis: "
        "the step reached by then."
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n"
        f"{markdown_to_html(render_markdown(report))}\n"
        f"<h2>Over time</h2>\n<p>{escape(note)}</p>\n{_key(run)}\n{charts}\n</body></html>\n"
    )
