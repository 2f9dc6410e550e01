"""Human forms of ``memtui status`` and ``memtui ls``: short aligned tables with units."""

from __future__ import annotations

from collections.abc import Sequence

from engine.domain import RankMemory, RunStatus, slowest_rank
from memtui.formatting import (
    PLACEHOLDER,
    format_age,
    format_bytes,
    format_duration,
    format_float,
    format_loss,
    format_percent,
    format_rate,
    format_scale,
)


def status_rows(status: RunStatus, now: float) -> list[tuple[str, str]]:
    s = status
    target = f" / {s.target_steps}" if s.target_steps else ""
    rows = [
        ("run", s.run_id),
        ("state", s.state + (f" ({s.exit_reason})" if s.exit_reason else "")),
        *([("held by", s.held_by)] if s.held_by else []),
        *([("node", s.node)] if s.node else []),
        *([("start-up", startup_text(s, now))] if s.startup else []),
        ("step", f"{s.step}{target}"),
        ("loss", format_float(s.loss)),
        *([("eval loss", eval_text(s))] if s.last_eval else []),
        ("throughput", format_rate(s.tokens_per_s) + data_wait_text(s)),
        ("loss scale", format_scale(s.loss_scale)),
        ("memory", memory_text(s)),
        (
            "batch",
            f"micro {s.micro_batch or PLACEHOLDER} x accum {s.grad_accum or PLACEHOLDER}"
            f" x world {s.world_size or PLACEHOLDER}",
        ),
        *rank_rows(s),
        ("checkpoint", checkpoint_text(s)),
        ("restarts", restarts_text(s)),
        ("running for", format_duration(now - s.started_at) if s.started_at else PLACEHOLDER),
        ("last step", format_age(now - s.updated_at) if s.updated_at else "never"),
        ("pids", f"supervisor {s.supervisor_pid or PLACEHOLDER}, trainer {s.trainer_pid or PLACEHOLDER}"),
        ("dir", s.run_dir),
    ]
    return rows


def eval_text(s: RunStatus) -> str:
    """The newest eval's held-out loss, its step, and the workload's scalars of it."""
    e = s.last_eval
    if e is None:
        return PLACEHOLDER
    metrics = "".join(f", {name} {format_float(value)}" for name, value in e.metrics.items())
    return f"{format_loss(e.loss)} at step {e.step}{metrics}"


def restarts_text(s: RunStatus) -> str:
    """Every restart of the trainer, as the console's header counts them: a supervisor's,
    and those across supervisor lives (the whole tree died and ``memtui resume`` brought it
    back), said apart."""
    count = s.restarts + s.whole_tree_resumes
    return (
        f"{count}, {s.whole_tree_resumes} after the whole tree died" if s.whole_tree_resumes else str(count)
    )


def data_wait_text(s: RunStatus) -> str:
    """``, waits for data 12% of the step`` (nothing before a trainer measured it)."""
    if s.data_wait_s is None or not s.step_time_s:
        return ""
    return f", waits for data {format_percent(s.data_wait_s / s.step_time_s)} of the step"


def memory_text(s: RunStatus) -> str:
    """Allocated and reserved of capacity, what they measure, and (CUDA) NVML's device used
    and the allocator's fragmented bytes."""
    memory = "cuda" if s.mem_kind == "cuda" else "process RSS, CPU stand-in" if s.mem_kind else None
    used = f", device used {format_bytes(s.mem_device_used)}" if s.mem_device_used is not None else ""
    if s.mem_fragmentation is not None:
        used += f", fragmented {format_bytes(s.mem_fragmentation)}"
    return (
        f"{format_bytes(s.mem_allocated)} allocated, {format_bytes(s.mem_reserved)} reserved"
        f" of {format_bytes(s.mem_capacity)}" + (f" ({memory})" if memory else "") + used
    )


def startup_text(s: RunStatus, now: float) -> str:
    """The starting trainer's phase and for how long it has been in it."""
    if s.startup is None:
        return PLACEHOLDER
    began = format_duration(max(0.0, now - s.startup.since))
    return f"{s.startup.label} for {began} (attempt {s.startup.attempt})"


def checkpoint_text(s: RunStatus) -> str:
    """The checkpoint a resume starts from (the newest that verifies), the newer ones that
    do not, and the newest save if it did not succeed."""
    text = f"step {s.checkpoint_step}" if s.checkpoint_step is not None else "none verified"
    if s.checkpoint_rejected:
        text += f" (does not verify: {'; '.join(s.checkpoint_rejected)})"
    save = s.last_save
    if save is not None and save.outcome != "saved":
        missed = "failed" if save.outcome == "failed" else "was skipped"
        text += f"; the last save (step {save.step}) {missed}: {save.reason or 'no reason given'}"
    return text


def rank_rows(s: RunStatus) -> list[tuple[str, str]]:
    """Several ranks: one row per rank from the newest rank report, its own step time with
    the slowest rank (the one the others wait for) said."""
    slow = slowest_rank(s.ranks or [])
    slowest = None if slow is None else slow.rank
    return [
        (
            f"rank {r.rank}",
            f"{format_bytes(r.allocated)} allocated, {format_bytes(r.reserved)} reserved, "
            f"peak {format_bytes(r.peak)}{_pace(r, slowest)} (step {s.ranks_step})",
        )
        for r in s.ranks or []
    ]


def _pace(r: RankMemory, slowest: int | None) -> str:
    """``, 0.412 s own step time (slowest), 0.020 s collective, 0.001 s data wait``."""
    if r.step_s is None:
        return ""
    own = f", {r.step_s:.3f} s own step time" + (" (slowest)" if r.rank == slowest else "")
    comm = f", {r.comm_s:.3f} s collective" if r.comm_s is not None else ""
    data = f", {r.data_wait_s:.3f} s data wait" if r.data_wait_s is not None else ""
    return own + comm + data


def render_status(status: RunStatus, now: float) -> str:
    rows = status_rows(status, now)
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


LS_HEADER = ("RUN", "STATE", "STEP", "LOSS", "AGE")


def ls_row(status: RunStatus, age_s: float | None) -> tuple[str, ...]:
    target = f"/{status.target_steps}" if status.target_steps else ""
    return (
        status.run_id,
        status.state,
        f"{status.step}{target}",
        format_float(status.loss),
        format_age(age_s),
    )


def render_table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...] = LS_HEADER) -> str:
    """Left-aligned columns separated by two spaces."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table
    )
