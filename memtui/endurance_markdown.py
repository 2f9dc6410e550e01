"""The endurance report as Markdown: a heading, the figures table, chaos by kind, and the
memory adaptations (each with the optimizer's samples per step before and after), and the
workload's own metrics (each one's newest value).

Pure: a report in, text out; ``memtui report``, ``memtui endure`` and the console's
endurance screen share it. Torch-free.
"""

from __future__ import annotations

from engine.run.reports.endurance_report import EnduranceReport
from memtui.formatting import format_float, format_loss


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _resume_success(report: EnduranceReport) -> str:
    """Resumes that stepped of those counted, and the ones stopped on request before a step."""
    text = f"{report.resumes_stepped}/{report.resumes} ({_share(report.resume_success)})"
    n = report.resumes_stopped
    return text + (f"; {n} stopped on request during start-up, not counted" if n else "")


def figure_rows(report: EnduranceReport) -> list[tuple[str, str]]:
    """(figure, value) in the order the report lists them."""
    t = report.throughput
    return [
        ("state", report.state or "-"),
        ("steps sustained / target", f"{report.steps_sustained:,} / {report.target_steps:,}"),
        ("wall time", f"{report.wall_s:,.0f} s ({report.wall_s / 3600:.2f} h)"),
        (
            "tokens/s average (run / attempt)",
            f"{_rate(t.run_avg_tokens_per_s)} / {_rate(t.attempt_avg_tokens_per_s)}",
        ),
        (
            f"tokens/s peak, best window of {t.window_steps}+ steps (run / attempt)",
            f"{_rate(t.run_peak_tokens_per_s)} / {_rate(t.attempt_peak_tokens_per_s)}",
        ),
        ("fatal OOMs", str(report.fatal_ooms)),
        ("OOMs recovered", str(report.ooms_recovered)),
        ("memory adaptations", str(len(report.adaptations))),
        ("samples per optimizer step constant", "yes" if report.samples_per_step_constant else "NO"),
        (
            "chaos injected / recovered",
            f"{_chaos_total(report, 'injected')} / {_chaos_total(report, 'recovered')}",
        ),
        ("trainer restarts", str(report.restarts)),
        ("whole-tree kills resumed", str(report.whole_tree_resumes)),
        ("resume success", _resume_success(report)),
        ("steps replayed after restarts", f"{report.steps_replayed:,}"),
        ("chaos cost: outage / replay / aftermath / slowed steps", _chaos_cost(report)),
        ("checkpoint stall share", f"{_share(report.stall_share)} ({report.checkpoint_stall_s:,.1f} s)"),
        ("eval share", f"{_share(report.eval_share)} ({report.evals.seconds if report.evals else 0:,.1f} s)"),
        ("eval loss first / best / last", _eval_losses(report)),
        ("saves (failed or skipped)", f"{report.saves} ({report.saves_failed})"),
        (
            "directives proposed / allowed / clamped / rejected by the policy",
            f"{report.directives_proposed} / {report.directives_allowed} / "
            f"{report.directives_clamped} / {report.directives_rejected}",
        ),
        (
            "directives approved / clamped / rejected by the operator",
            f"{report.directives_operator_approved} / {report.directives_operator_clamped} / "
            f"{report.directives_operator_rejected}",
        ),
        ("directives applied (a restart's re-send is none)", str(report.directives_applied)),
    ]


def _chaos_cost(report: EnduranceReport) -> str:
    cost = report.chaos_cost
    return (
        f"{cost.outage_s:,.1f} / {cost.replay_s:,.1f} / {cost.aftermath_s:,.1f} / {cost.slowed_s:,.1f} s "
        f"= {cost.total_s:,.1f} s "
        f"({_share(report.chaos_share)} of wall time)"
    )


def _restart_rows(report: EnduranceReport) -> list[str]:
    """The cost of each restart, and the total (seconds)."""
    cost = report.chaos_cost
    lines = [
        "",
        "## Restarts: outage, replay and aftermath",
        "",
        "| attempt | cause | outage | steps replayed | replay | aftermath (steps) |",
        "|---|---|---|---|---|---|",
    ]
    rows = [
        (
            str(r.attempt),
            r.cause or "-",
            r.outage_s,
            r.steps_replayed,
            r.replay_s,
            r.aftermath_s,
            r.steps_aftermath,
        )
        for r in cost.restarts
    ]
    after_steps = sum(r.steps_aftermath for r in cost.restarts)
    rows.append(
        ("total", "", cost.outage_s, cost.steps_replayed, cost.replay_s, cost.aftermath_s, after_steps)
    )
    lines += [
        f"| {a} | {c} | {o:,.1f} s | {n:,} | {r:,.1f} s | {f:,.1f} s ({k:,}) |"
        for a, c, o, n, r, f, k in rows
    ]
    median = "-" if cost.median_step_s is None else f"{cost.median_step_s:.3f} s"
    lines += [
        "",
        f"Slowed steps: {cost.steps_slowed:,} steps slower than the median ({median}) while a chaos "
        f"effect lasted, {cost.slowed_s:,.1f} s beyond it. A restart's aftermath: its steps until the "
        "spare trainer started behind it was ready (its imports take the trainer's cores on a CPU "
        "host), and their time beyond as many median steps (a faster step offsets a slower one).",
    ]
    return lines


def _eval_losses(report: EnduranceReport) -> str:
    """``5.412 (step 200) / 3.120 (step 1800) / 3.150 (step 2000)``, or ``-`` with no eval."""
    e = report.evals
    if e is None:
        return "-"
    return " / ".join(f"{format_loss(p.loss)} (step {p.step})" for p in (e.first, e.best, e.last))


def _chaos_total(report: EnduranceReport, field: str) -> int:
    return sum(getattr(tally, field) for tally in report.chaos.values())


def render_markdown(report: EnduranceReport) -> str:
    """The whole report as Markdown text (ends with a newline)."""
    lines = [f"# Endurance report: {report.name} ({report.run_id})", "", "| figure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in figure_rows(report)]
    if report.chaos:
        lines += [
            "",
            "## Chaos by kind",
            "",
            "| kind | injected | recovered | failed | pending |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {kind} | {t.injected} | {t.recovered} | {t.failed} | {t.pending} |"
            for kind, t in report.chaos.items()
        ]
    if report.chaos_cost.restarts or report.chaos_cost.steps_slowed:
        lines += _restart_rows(report)
    if report.adaptations:
        lines += [
            "",
            "## Memory adaptations",
            "",
            "| step | kind | samples/step before | after |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {a.step} | {a.kind} | {a.samples_before} | {a.samples_after} |" for a in report.adaptations
        ]
    if report.rollbacks:
        lines += ["", "## Rollbacks", "", "| to tag | from step | steps given up | steps of data skipped |"]
        lines += ["|---|---|---|---|"]
        lines += [
            f"| {r.tag} | {r.from_step} | {r.steps_given_up} | {r.skip_batches} |" for r in report.rollbacks
        ]
    if report.metrics:
        lines += ["", "## Workload metrics (newest value)", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {format_float(value)} |" for name, value in report.metrics.items()]
    return "\n".join(lines) + "\n"
