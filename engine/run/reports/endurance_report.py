"""The endurance report: what a run sustained and survived, computed from its store alone.

Every figure is a count or a sum over the store's tables (steps, events, decisions), so
it answers for any run, live, stopped or long gone, and a test can check each one against
a direct count. Resumes are of two kinds: a trainer restarted by its supervisor (an attempt
after a ``trainer_restarted``), and a whole run brought back by ``memtui resume`` after its
supervisor died with it (a ``run_started`` whose previous state was not an ending: a host
reboot or a whole-tree kill). A resume succeeded when its attempt stored a step.
Torch-free.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.domain import TERMINAL_STATES, ThroughputFigures
from engine.events import (
    ChaosInjected,
    ChaosRecovered,
    LegacyChaos,
    MemoryAdapted,
    RolledBack,
)
from engine.run.directory import RunDir
from engine.run.reports.chaos_cost import ChaosCost, chaos_cost
from engine.run.reports.directive_tally import directive_tally
from engine.run.reports.eval_history import EvalLosses, stored_evals
from engine.run.reports.metric_history import last_metrics
from engine.run.reports.status import identity_of, whole_tree_resumes
from engine.run.reports.throughput import throughput_of
from engine.run.storage.store import Store
from engine.run.storage.stored_events import payloads_of

LEGACY_KINDS = {"kill_trainer": "kill"}
"""The old ``chaos`` event's action -> today's kind."""


class Adaptation(BaseModel):
    """One change of the batch geometry by the memory controller."""

    model_config = ConfigDict(extra="forbid")

    step: int
    kind: str
    """``shrink``, ``grow``, ``oom`` or ``resume``."""
    samples_before: int
    """Samples per optimizer step per rank before: micro-batch x gradient accumulation."""
    samples_after: int


class ChaosTally(BaseModel):
    """Injections of one kind and what became of them."""

    model_config = ConfigDict(extra="forbid")

    injected: int = 0
    recovered: int = 0
    failed: int = 0
    """``chaos_recovered`` said it did not recover."""

    @property
    def pending(self) -> int:
        """Injected with no verdict yet (or from before verdicts were recorded)."""
        return max(0, self.injected - self.recovered - self.failed)


class EnduranceReport(BaseModel):
    """What ``memtui report`` prints. Times in seconds, throughput in tokens/s."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    name: str
    state: str | None
    target_steps: int
    steps_sustained: int
    """The newest step any attempt reached."""
    step_samples: int
    """Step rows stored, replays included."""
    wall_s: float
    """From the first stored event or step to the last."""
    throughput: ThroughputFigures
    fatal_ooms: int
    """``memory_exhausted``: out of memory at the smallest micro-batch, the trainer stopped."""
    ooms_recovered: int
    """OOMs the controller survived by shrinking the micro-batch (``memory_adapted`` kind oom)."""
    adaptations: list[Adaptation] = Field(default_factory=list)
    samples_per_step_constant: bool = True
    """Every adaptation kept micro-batch x gradient accumulation (the optimizer's batch)."""
    chaos: dict[str, ChaosTally] = Field(default_factory=dict)
    restarts: int
    """Trainers restarted by their supervisor."""
    whole_tree_resumes: int
    """Runs brought back after their supervisor died (a reboot, a whole-tree kill)."""
    resumes: int
    """Attempts that followed a restart or a whole-tree resume (the newest one of a live
    run not counted until it has stepped or ended; one stopped on request before its first
    step not counted: see ``resumes_stopped``)."""
    resumes_stepped: int
    resumes_stopped: int = 0
    """Resumed attempts stopped on request (``stop_requested``) before their first step:
    neither a success nor a failure of the resume, so in neither figure above."""
    steps_replayed: int
    """Steps trained again: an attempt's steps at or below what earlier attempts reached."""
    chaos_cost: ChaosCost = Field(default_factory=ChaosCost)
    """Outage and replay per restart, and the steps chaos slowed (engine.run.reports.chaos_cost)."""
    rollbacks: list[RolledBack] = Field(default_factory=list)
    """Rollbacks performed, oldest first: the tag, the steps given up, the data skipped."""
    checkpoint_stall_s: float
    evals: EvalLosses | None = None
    """Held-out losses (first, best, last) and the seconds evals held training; None: no eval."""
    saves: int
    saves_failed: int
    directives_proposed: int
    directives_allowed: int = 0
    """Proposals the policy allowed as asked; with clamped and rejected: every proposal."""
    directives_clamped: int
    """Proposals the policy clamped into its bounds."""
    directives_rejected: int
    """Proposals the policy rejected."""
    directives_operator_approved: int = 0
    directives_operator_clamped: int = 0
    directives_operator_rejected: int = 0
    directives_applied: int
    """Directives the trainer applied, each once (a restart's re-send is no apply)."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """The workload's own metrics: each name's value on the newest step that reported it."""

    @property
    def resume_success(self) -> float | None:
        """Share of resumes that stepped (1.0 = 100%); None without any resume."""
        return self.resumes_stepped / self.resumes if self.resumes else None

    @property
    def chaos_share(self) -> float:
        """Outages, replays and slowed steps over wall seconds."""
        return self.chaos_cost.total_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def eval_share(self) -> float:
        """Eval seconds over wall seconds (evals hold training, as saves do)."""
        seconds = self.evals.seconds if self.evals else 0.0
        return seconds / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def stall_share(self) -> float:
        """Checkpoint stall seconds over wall seconds."""
        return self.checkpoint_stall_s / self.wall_s if self.wall_s > 0 else 0.0

    def document(self) -> dict[str, Any]:
        """The JSON document: every field plus the derived shares."""
        doc = self.model_dump(mode="json")
        doc["chaos"] = {k: {**v.model_dump(), "pending": v.pending} for k, v in self.chaos.items()}
        doc["chaos_cost"].update(self.chaos_cost.totals(), share=self.chaos_share)
        doc.update(resume_success=self.resume_success, checkpoint_stall_share=self.stall_share)
        doc.update(eval_share=self.eval_share)
        return doc


def endurance_report(run: RunDir, store: Store) -> EnduranceReport:
    """The report of ``run`` from ``store`` (read-only use)."""
    run_id, name, target, _ = identity_of(run)
    steps_n, top_step, stall, first_step, last_step = store.query(
        "SELECT COUNT(*), COALESCE(MAX(step), 0), COALESCE(SUM(checkpoint_stall_s), 0),"
        " MIN(ts), MAX(ts) FROM steps"
    )[0] or (0, 0, 0.0, None, None)
    first_ev, last_ev = store.query("SELECT MIN(ts), MAX(ts) FROM events")[0] or (None, None)
    starts = [t for t in (first_step, first_ev) if t is not None]
    ends = [t for t in (last_step, last_ev) if t is not None]
    wall = max(ends) - min(starts) if starts and ends else 0.0
    counts = _type_counts(store)
    adaptations = [_adaptation(p) for p in _payloads(store, MemoryAdapted)]
    resumes, stepped, stopped = _resumes(store)
    cost = chaos_cost(store)
    state = store.read_meta().state
    return EnduranceReport(
        run_id=run_id,
        name=name,
        state=state,
        target_steps=target,
        steps_sustained=int(top_step),
        step_samples=int(steps_n),
        wall_s=float(wall),
        throughput=throughput_of(store),
        fatal_ooms=counts["memory_exhausted"],
        ooms_recovered=sum(1 for a in adaptations if a.kind == "oom"),
        adaptations=adaptations,
        samples_per_step_constant=all(a.samples_before == a.samples_after for a in adaptations),
        chaos=_chaos(store),
        restarts=counts["trainer_restarted"],
        whole_tree_resumes=whole_tree_resumes(store),
        resumes=resumes,
        resumes_stepped=stepped,
        resumes_stopped=stopped,
        steps_replayed=cost.steps_replayed,
        chaos_cost=cost,
        rollbacks=_payloads(store, RolledBack),
        checkpoint_stall_s=float(stall),
        evals=EvalLosses.of(stored_evals(store)),
        saves=counts["checkpoint_saved"],
        saves_failed=counts["checkpoint_failed"] + counts["checkpoint_skipped"],
        **_directive_counts(store),
        metrics=last_metrics(store),
    )


# ------------------------------------------------------------------------ parts


def _type_counts(store: Store) -> Counter[str]:
    return Counter({t: int(n) for t, n in store.query("SELECT type, COUNT(*) FROM events GROUP BY type")})


def _payloads(store: Store, model: Any) -> list[Any]:
    """Typed payloads of ``model``'s events (a damaged row is left out, never a crash)."""
    return [payload for _, payload in payloads_of(store, model)]


def _adaptation(p: MemoryAdapted) -> Adaptation:
    return Adaptation(
        step=p.step,
        kind=p.kind,
        samples_before=p.from_micro_batch * p.from_grad_accum,
        samples_after=p.to_micro_batch * p.to_grad_accum,
    )


def _chaos(store: Store) -> dict[str, ChaosTally]:
    """Injections by kind (today's events and the legacy ``chaos``) and their verdicts."""
    tally: dict[str, ChaosTally] = {}
    for injected in _payloads(store, ChaosInjected):
        tally.setdefault(injected.kind, ChaosTally()).injected += 1
    for legacy in _payloads(store, LegacyChaos):
        kind = LEGACY_KINDS.get(legacy.action, legacy.action)
        tally.setdefault(kind, ChaosTally()).injected += 1
    verdicts = {v.chaos_id: v for v in _payloads(store, ChaosRecovered)}  # one per injection
    for verdict in verdicts.values():
        entry = tally.setdefault(verdict.kind, ChaosTally())
        if verdict.recovered:
            entry.recovered += 1
        else:
            entry.failed += 1
    return dict(sorted(tally.items()))


def _resumes(store: Store) -> tuple[int, int, int]:
    """(resumes, resumes that stepped, resumes stopped on request before a step): every
    attempt after the first one launched; the newest attempt of a run still going counts
    once it has stepped; one that never stepped and during whose start-up (from its launch
    to the next) a stop was requested is neither a success nor a failure."""
    launches = store.query(
        "SELECT attempt, MIN(seq) FROM events WHERE type = 'trainer_launched'"
        " GROUP BY attempt ORDER BY attempt"
    )
    stops = [int(s) for (s,) in store.query("SELECT seq FROM events WHERE type = 'stop_requested'")]
    stepped = {int(a) for (a,) in store.query("SELECT DISTINCT attempt FROM steps")}
    nexts = [*(int(seq) for _, seq in launches[1:]), None][: len(launches)]
    # (attempt, its launch's seq, the next launch's seq or None), the first attempt left out
    later = [(int(a), int(seq), upto) for (a, seq), upto in zip(launches, nexts, strict=True)][1:]
    ended = store.read_meta().state in TERMINAL_STATES
    if later and not ended and later[-1][0] not in stepped:
        later = later[:-1]  # still starting: neither a success nor a failure yet
    stopped = {
        a
        for a, since, upto in later
        if a not in stepped and any(since < s and (upto is None or s < upto) for s in stops)
    }
    counted = [a for a, _, _ in later if a not in stopped]
    return len(counted), sum(1 for a in counted if a in stepped), len(stopped)


def _directive_counts(store: Store) -> dict[str, int]:
    """The report's directive fields (``engine.run.reports.directive_tally``)."""
    tally = directive_tally(store)
    return {f"directives_{name}": value for name, value in tally.model_dump().items()}
