"""``memtui export --format tensorboard``: a run's store as one TensorBoard run directory.

Every stored step's scalars at their step and wall time (``STEP_TAGS``, then the workload's
own metrics under ``workload/NAME``), every eval's loss and metrics (``eval/...``), and every
event as text under ``events`` (its type, severity and message) at the step the run had
reached. Every stored sample is written, in the order stored, at its own wall time: a
restart's replayed steps are there twice (TensorBoard's wall-time axis shows the attempts
apart); the event files say version 2, so TensorBoard's reader purges nothing.

Written with TensorBoard's own event-file writer and protos (no TensorFlow, no torch); the
package is the optional extra ``memtui[tensorboard]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.domain import Event, TelemetrySample
from engine.events import EvalCompleted
from engine.run.storage.store import Store

EXTRA = "memtui[tensorboard]"
"""The optional extra that brings the writer in."""
STEP_TAGS: dict[str, str] = {
    "train/loss": "loss",
    "train/lr": "lr",
    "train/grad_norm": "grad_norm",
    "train/loss_scale": "loss_scale",
    "throughput/tokens_per_s": "tokens_per_s",
    "throughput/mfu": "mfu",
    "memory/allocated_bytes": "mem_allocated",
    "memory/reserved_bytes": "mem_reserved",
    "memory/peak_bytes": "mem_peak",
    "memory/step_peak_bytes": "mem_step_peak",
    "memory/capacity_bytes": "mem_capacity",
    "memory/budget_bytes": "mem_budget",
}
"""TensorBoard tag -> ``TelemetrySample`` field (a None field writes no point)."""
WORKLOAD_PREFIX = "workload/"
"""Tag of one of the workload's own step scalars: ``workload/accuracy``."""
EVAL_LOSS_TAG = "eval/loss"
EVAL_METRIC_PREFIX = "eval/workload/"
EVENTS_TAG = "events"
PAGE_ROWS = 5000
QUEUE_EVENTS = 4096
"""Events the writer's thread may lag behind by (its default, 10, hands over at every step: 4x slower)."""


class TensorBoardMissing(RuntimeError):
    """The ``tensorboard`` package is not installed."""


def _writer_parts() -> tuple[Any, Any]:
    """TensorBoard's writer class and its Summary proto, or TensorBoardMissing naming the extra."""
    try:
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise TensorBoardMissing(
            f"--format tensorboard needs the tensorboard package: pip install '{EXTRA}'"
        ) from None
    return EventFileWriter, summary_pb2


def step_scalars(sample: TelemetrySample) -> dict[str, float]:
    """One sample's scalars by tag (fields that are None left out)."""
    scalars = {tag: getattr(sample, field) for tag, field in STEP_TAGS.items()}
    scalars.update({WORKLOAD_PREFIX + name: value for name, value in (sample.metrics or {}).items()})
    return {tag: float(value) for tag, value in scalars.items() if value is not None}


def event_text(event: Event) -> str:
    """What an event reads as in TensorBoard's text tab (Markdown)."""
    return f"**{event.type}** ({event.severity}): {event.message or '-'}"


class _TensorBoardFile:
    """One event file: scalars and text, each at a step and a wall time (Unix seconds)."""

    def __init__(self, out: Path) -> None:
        writer_class, self._pb = _writer_parts()
        self._writer = writer_class(str(out), max_queue_size=QUEUE_EVENTS)
        self._text_meta = self._pb.SummaryMetadata(
            plugin_data=self._pb.SummaryMetadata.PluginData(plugin_name="text")
        )
        self.points = 0

    def scalars(self, step: int, wall_time: float, values: dict[str, float]) -> None:
        summary = self._pb.Summary(
            value=[self._pb.Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()]
        )
        self._add(summary, step, wall_time)

    def text(self, step: int, wall_time: float, text: str) -> None:
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

        tensor = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING,
            string_val=[text.encode("utf-8")],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[]),
        )
        value = self._pb.Summary.Value(tag=EVENTS_TAG, metadata=self._text_meta, tensor=tensor)
        self._add(self._pb.Summary(value=[value]), step, wall_time)

    def _add(self, summary: Any, step: int, wall_time: float) -> None:
        from tensorboard.compat.proto import event_pb2

        self._writer.add_event(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
        self.points += len(summary.value)

    def close(self) -> None:
        self._writer.close()


def _events(store: Store) -> Iterator[Event]:
    seq = 0
    while page := store.events_since(seq, PAGE_ROWS):
        yield from page
        seq = page[-1].seq


def export_tensorboard(store_path: Path, out: Path) -> int:
    """Write the run in ``store_path`` as a TensorBoard event file under ``out``; returns the
    points written (scalars and texts)."""
    _writer_parts()  # fail before creating anything when the extra is missing
    if out.is_dir() and any(out.glob("*tfevents*")):
        raise FileExistsError(f"{out} already holds a TensorBoard event file: give a new directory")
    out.mkdir(parents=True, exist_ok=True)
    with Store(store_path, readonly=True) as store:
        board = _TensorBoardFile(out)
        try:
            _write_run(store, board)
        finally:
            board.close()
        return board.points


def _write_run(store: Store, board: _TensorBoardFile) -> None:
    """Steps in stored order, each event (by time) at the newest step stored before it."""
    events = _events(store)
    pending = next(events, None)
    step = 0
    for sample in store.iter_steps(PAGE_ROWS):
        while pending is not None and pending.ts < sample.ts:
            _write_event(board, step, pending)
            pending = next(events, None)
        step = sample.step
        board.scalars(step, sample.ts, step_scalars(sample))
    while pending is not None:
        _write_event(board, step, pending)
        pending = next(events, None)


def _write_event(board: _TensorBoardFile, step: int, event: Event) -> None:
    """The event as text; an eval's loss and metrics also as scalars at the eval's own step."""
    board.text(step, event.ts, event_text(event))
    result = EvalCompleted.of(event)
    if result is not None:
        board.scalars(result.step, event.ts, eval_scalars(result))


def eval_scalars(result: EvalCompleted) -> dict[str, float]:
    """One eval's scalars by tag."""
    values = {EVAL_LOSS_TAG: result.loss}
    return values | {EVAL_METRIC_PREFIX + name: value for name, value in result.metrics.items()}
