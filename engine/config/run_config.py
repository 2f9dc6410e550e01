"""The run's configuration: ``RunConfig`` and its parts, each with a docstring per field.

Validated once at the edge (``engine.config.config_file`` reads TOML, JSON and ``--set``) and
passed down; every model is strict about unknown keys, so a typo in a config file is an
error that names the key. Thresholds and bounds live here, and the console learns them
from the run. Torch-free.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from engine.chaos.config import ChaosConfig
from engine.config.oversight import AlertConfig, PolicyConfig, StrictSection
from engine.domain import Thresholds

# re-exported: every part of the config here
__all__ = ["AlertConfig", "PolicyConfig"]

Precision = Literal["fp16", "bf16", "fp32"]
PresetName = Literal["tiny", "small"]


_Strict = StrictSection


# --------------------------------------------------------------------------- config


class ModelConfig(_Strict):
    """Shape of the built-in byte-level decoder-only transformer."""

    n_layer: int = Field(2, ge=1, le=96)
    """Transformer blocks."""
    n_head: int = Field(4, ge=1, le=128)
    """Attention heads per block; must divide d_model."""
    d_model: int = Field(64, ge=8, le=16384)
    """Residual stream width (channels)."""
    seq_len: int = Field(128, ge=8, le=65536)
    """Context length in bytes (tokens)."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout probability in attention and MLP."""
    seq_len_start: int | None = Field(None, ge=2)
    """Built-in model: train sequences of this many tokens first, doubled every
    ``seq_len_doubling_steps`` optimizer steps up to ``seq_len`` (a longer-context phase
    later in the run; the memory controller shrinks the micro-batch before a longer step
    would not fit). None: every step trains ``seq_len``."""
    seq_len_doubling_steps: int = Field(1000, ge=1)
    """Optimizer steps between doublings of the sequence length (with ``seq_len_start``)."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        if self.seq_len_start is not None and self.seq_len_start > self.seq_len:
            raise ValueError(f"seq_len_start ({self.seq_len_start}) must not exceed seq_len ({self.seq_len})")
        return self


class HfConfig(_Strict):
    """A Hugging Face ``transformers`` causal LM and a local text dataset, instead of the
    built-in byte-level model (``pip install 'memtui[hf]'``; nothing is downloaded)."""

    model_dir: str | None = None
    """A local directory with ``config.json``, the tokenizer's files and (optionally) weights
    (``model.safetensors`` or ``pytorch_model.bin``; without them the model starts from a
    random initialisation seeded by ``seed``). Sequences are ``model.seq_len`` tokens."""
    data: str | None = None
    """A local ``.txt`` (one document) or ``.jsonl`` (one document per line) file; tokenized
    once by the model's tokenizer into a cache, then packed into sequences."""
    text_key: str = Field("text", min_length=1)
    """The field of each JSONL line that holds the text."""
    packing: bool = True
    """True: documents are packed into one token stream cut into ``model.seq_len`` windows.
    False: each sample is one document (its first ``model.seq_len + 1`` tokens), the
    micro-batch padded to its longest with the padding left out of the loss, so sequence
    lengths vary by step as the documents do (the memory controller predicts by tokens)."""

    @model_validator(mode="after")
    def _data_with_model(self) -> HfConfig:
        if (self.model_dir is None) != (self.data is None):
            raise ValueError("model_dir and data go together: both or neither")
        return self


def endpoint_problem(text: str) -> str | None:
    """What is wrong with ``text`` as a rendezvous endpoint ``HOST:PORT``; None if nothing.
    A host name is at most 253 bytes in labels of at most 63 (DNS; longer fails in the
    resolver's IDNA codec), a port 1-65535; ``[v6 address]`` hosts are taken as written."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or any(c.isspace() for c in text):
        return f"{text[:60]!r} is not HOST:PORT"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"port {port[:20]!r} is not a number from 1 to 65535"
    if host.startswith("["):
        return None if host.endswith("]") and len(host) <= 64 else f"{host[:60]!r} is not an [IPv6] host"
    if len(host.encode()) > 253 or any(not 1 <= len(label.encode()) <= 63 for label in host.split(".")):
        return f"host {host[:60]!r} is not a host name (labels of 1-63 bytes, 253 in all)"
    return None


class TrainConfig(_Strict):
    """Optimisation and batch geometry. Samples are sequences of ``model.seq_len`` bytes."""

    precision: Precision = "fp16"
    """fp16 uses DeepSpeed's dynamic loss scaling; bf16 and fp32 have none."""
    zero_stage: int = Field(0, ge=0, le=3)
    """DeepSpeed ZeRO stage."""
    micro_batch: int = Field(8, ge=1, le=65536)
    """Samples per forward/backward on one rank."""
    global_batch: int = Field(8, ge=1, le=1 << 24)
    """Samples per optimizer step over all ranks: micro_batch x grad_accum x world_size."""
    lr: float = Field(3e-3, gt=0.0, le=10.0)
    """Peak learning rate (after warm-up)."""
    min_lr: float = Field(3e-4, ge=0.0, le=10.0)
    """Learning rate at the end of the cosine decay."""
    warmup_steps: int = Field(50, ge=0)
    """Optimizer steps of linear warm-up."""
    weight_decay: float = Field(0.01, ge=0.0, le=1.0)
    """AdamW's decoupled weight decay (the optimizer memtui configures for DeepSpeed)."""
    grad_clip: float = Field(1.0, ge=0.0)
    """Global gradient-norm clip; 0 disables clipping."""
    initial_scale_power: int = Field(12, ge=0, le=40)
    """fp16 only: the dynamic loss scale starts at 2**initial_scale_power."""
    activation_checkpointing: bool = False
    """Recompute each transformer block's activations in backward instead of keeping them
    (the built-in model per block; a Hugging Face model by its own switch): less memory
    per sample for about a third more compute. The plan and the memory model count it."""
    prefetch: bool | Literal["auto"] = "auto"
    """Build the next micro-batch on a background thread while the current one trains (on
    CUDA into pinned memory, so the copy to the device is asynchronous). The batches are the
    same either way. "auto": on with CUDA, off on the CPU, where the thread takes a core from
    the training's own threads (``bench/prefetch.py`` on 2 cores: 9-23% fewer tokens/s, for a
    data wait under 1% without it); true for a slow ``batch()`` on a CPU host with cores to spare; false
    for a workload whose ``batch()`` must not run on another thread."""
    ranks: int = Field(1, ge=1, le=64)
    """Data-parallel trainer processes on this host; more than 1 starts them with torchrun
    (``python -m torch.distributed.run --standalone``), rank 0 talking to the supervisor."""
    rank_report_every: int = Field(10, ge=1)
    """With several ranks: optimizer steps between exchanges of every rank's memory."""
    collective_timeout_s: float = Field(300.0, gt=0.0, le=86400.0)
    """Seconds one collective (an all-reduce, a barrier) may wait for the other ranks
    before the process group fails it (NCCL's or gloo's timeout, given to
    ``deepspeed.init_distributed``). Default 300 s (5 minutes), against DeepSpeed's 10 and
    NCCL's up to 30: a rank left waiting on a dead one fails in minutes and the supervisor
    restarts the group. It must outlast the slowest step and checkpoint save."""
    nodes: int = Field(1, ge=1, le=1024)
    """Hosts in the run, each with ``ranks`` processes. More than 1: each host runs
    ``memtui run ... --node-rank K``; node 0's supervisor is the run consoles attach to."""
    node_rank: int = Field(0, ge=0)
    """This host's place in the run (0 .. nodes-1); node 0 holds rank 0 and the store."""
    rdzv_endpoint: str | None = Field(None, pattern=r"^\S+:\d{1,5}$")
    """``HOST:PORT`` on node 0 where torchrun's rendezvous store listens (every node the same)."""

    @field_validator("rdzv_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        problem = None if value is None else endpoint_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    rdzv_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """A name shared by the run's nodes (default: derived from the training content of the
    config and the endpoint, ``engine.rendezvous``: hosts running the same config agree
    whatever their run names)."""
    rdzv_timeout_s: float = Field(300.0, gt=0.0, le=86400.0)
    """Seconds the nodes may take to meet at the rendezvous (from each attempt's launch);
    past it the run ends as failed with one line naming the likely mismatch (another
    endpoint, rendezvous id, config or node count; a node not started). The hang watch
    never counts a wait at the rendezvous: this bounds it."""

    @property
    def world_size(self) -> int:
        """Trainer processes over every node."""
        return self.ranks * self.nodes

    @model_validator(mode="after")
    def _global_is_multiple(self) -> TrainConfig:
        per_step = self.micro_batch * self.world_size  # samples of one micro-batch on every rank
        if self.global_batch % per_step:
            over = f"ranks x nodes ({self.micro_batch} x {self.ranks} x {self.nodes})"
            raise ValueError(
                f"global_batch ({self.global_batch}) must be a multiple of micro_batch x "
                + (over if self.nodes > 1 else f"ranks ({self.micro_batch} x {self.ranks})")
            )
        if self.node_rank >= self.nodes:
            raise ValueError(f"node_rank ({self.node_rank}) must be below nodes ({self.nodes})")
        if self.nodes > 1 and self.rdzv_endpoint is None:
            raise ValueError("rdzv_endpoint (HOST:PORT on node 0) is needed with nodes > 1")
        return self


class CheckpointConfig(_Strict):
    """When and how many checkpoints to keep."""

    every_steps: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    """Save every N optimizer steps; 0 saves only when the run stops. ``"auto"``: the
    trainer picks the interval from what a save stalls training and the step time, so that
    saves take at most ``max_stall`` of the run's time, between ``min_interval_steps`` and
    ``max_interval_steps`` (see engine.checkpoints.cadence); each choice is a
    ``checkpoint_cadence`` event with the figures it came from."""
    max_stall: float = Field(0.01, gt=0.0, lt=1.0)
    """``every_steps = "auto"``: the largest share of the run's time that training may stand
    still for saves (0.01 = 1%)."""
    min_interval_steps: int = Field(10, ge=1)
    """``every_steps = "auto"``: never save more often than every this many steps (a save
    that costs nothing would otherwise be taken every step)."""
    max_interval_steps: int = Field(5000, ge=1)
    """``every_steps = "auto"``: never save less often than every this many steps (bounds what
    a restart replays when a save is costly); also the interval while the disk cannot hold
    ``keep`` checkpoints of the newest one's size."""
    keep: int = Field(3, ge=1, le=1000)
    """Newest checkpoints kept."""
    every_minutes: float = Field(0.0, ge=0.0)
    """Also save when this many wall-clock minutes passed since the last save; 0 = off."""
    milestone_every: int = Field(0, ge=0)
    """Keep every checkpoint whose step is a multiple of N for good (beyond ``keep``); 0 = none."""
    min_free_mb: int = Field(0, ge=0)
    """MiB that must stay free on the disk after a save; a save that would cut into it is
    skipped with an alert (the older checkpoints are kept)."""
    background: bool = True
    """Seal each save (fsync, sha256, manifest, rename, verify, prune) on a background
    thread while training goes on, so that training waits only for DeepSpeed's write of the
    files. A save is committed (``latest`` moves) when its seal ends; one seals at a time,
    and the final save when the run stops is always sealed before the trainer exits.
    False: training waits for the whole save."""
    dir: str | None = None
    """Where checkpoints go (default: the run directory's ``checkpoints/``). With several
    nodes, a directory every node reaches at the same path (a shared filesystem): every
    rank writes its shards there and node 0 seals them. ``RUN_DIR/checkpoints`` links to it."""
    stop_grace_s: float = Field(60.0, gt=0.0)
    """Seconds from a stop request or SIGTERM to SIGKILL: the trainer finishes its step and
    writes an emergency checkpoint in this time (a kill mid-save leaves the previous one)."""

    @model_validator(mode="after")
    def _interval_bounds_ordered(self) -> CheckpointConfig:
        if self.min_interval_steps > self.max_interval_steps:
            raise ValueError(
                f"min_interval_steps ({self.min_interval_steps}) must not exceed "
                f"max_interval_steps ({self.max_interval_steps})"
            )
        return self


class RestartConfig(_Strict):
    """How the supervisor restarts a trainer that died unasked (signal, crash, non-zero exit)."""

    max_restarts: int = Field(5, ge=0, le=10_000)
    """Restarts in a row without progress (no new checkpoint and no step beyond the furthest
    one reached) before the run is failed; 0 never restarts."""
    backoff_initial_s: float = Field(1.0, ge=0.0)
    """Delay before the second restart of such a row; doubled for each further one. The
    first restart of a row (the run had progressed since the last restart) goes at once."""
    backoff_max_s: float = Field(60.0, ge=0.0)
    """The delay never grows beyond this."""
    on_preemption: bool = False
    """Also restart a trainer that stopped itself on SIGTERM without the run being asked to
    stop (a preempted node); False ends the run as stopped."""
    standby: bool = True
    """Keep one spare trainer that has already imported torch and DeepSpeed and loaded the
    ops, so that a restart skips the cold start (seconds on a CPU, more on a GPU host). It
    costs its resident memory while it waits (``standby_ready`` says how much). One rank on
    one node only: torchrun's ranks are started by torchrun after the rendezvous, and are
    always started cold. A new supervisor also starts its first trainer's imports beside its
    own start-up (the head start); off, the first trainer waits for the supervisor."""
    standby_after_s: float = Field(10.0, ge=0.0, le=86400.0)
    """The spare starts once the newest attempt has been stepping this long. A run that ends
    within it (a smoke run, a check) never pays for a spare's warm-up, seconds of a core that
    on a CPU host the trainer's steps lose; a restart within it starts cold. 0: at the
    attempt's first step."""
    hang_s: float | None = Field(None, gt=0.0, le=7 * 86400.0)
    """Seconds without a sign of life (a step, a start-up phase) after which a running
    trainer is taken for hung: its Python stacks are dumped into its log, its processes
    killed and it is restarted from the newest verified checkpoint. None: derived from the
    run's own pace, 20 times its median step interval, never under 600 s."""


class StorageConfig(_Strict):
    """What the supervisor does while the run's store cannot write (a full or failing disk).

    Training is held at the next step boundary, what arrives meanwhile is kept in memory
    and the write is retried with backoff (``engine.supervisor.storage_outage``); once it
    gets through, everything kept is written in order and training goes on by itself."""

    retired: ClassVar[dict[str, str]] = {
        "retry_initial_s": "1 s, doubled per retry (engine.supervisor.storage_outage.RETRY_FIRST_S)",
        "retry_max_s": "30 s (engine.supervisor.storage_outage.RETRY_MOST_S)",
        "buffer_steps": "10,000 steps (engine.supervisor.storage_outage.HELD_STEPS)",
        "final_write_s": "60 s (engine.supervisor.storage_outage.FINAL_WRITE_S)",
    }

    give_up_s: float = Field(1800.0, gt=0.0, le=7 * 86400.0)
    """Seconds the store may refuse writes before the run is ended: the trainer is asked to
    stop (with its final checkpoint, if the disk takes it) and the run ends as failed.
    Raise it where an operator is on call to free the disk; lower it where a held GPU
    costs more than a restarted run."""


class MemoryConfig(_Strict):
    """Adaptive memory: the budget the controller steers by and how it reacts.

    The controller keeps the micro-batch that trains fastest while its peak stays under
    the budget with a margin, changing the gradient accumulation with it so samples
    per optimizer step stay ``train.global_batch``. Its thresholds are fractions of the
    usable room: the budget minus the measured baseline no micro-batch changes (model
    states, the CUDA context; on the CPU the process's resident torch), so they mean the
    same on a GPU and on a CPU.
    """

    retired: ClassVar[dict[str, str]] = {
        "floor_skips": "10 steps (engine.trainer.memory.loss_scale_floor.FLOOR_SKIPS)",
    }

    budget: int | float | None = None
    """Bytes (an int > 1) or a fraction of the device's capacity (0 < x <= 1); None: the
    whole device (host RAM on the CPU). On CUDA made real with
    ``torch.cuda.set_per_process_memory_fraction``; on the CPU the capacity steered by."""
    adaptive: bool = True
    """Let the controller change the micro-batch; False keeps the configured geometry
    (OOMs are still recovered)."""
    warn: float = Field(0.85, gt=0.0, le=1.0)
    """Expected peak's share of the usable room at which the controller shrinks one notch
    (half the micro-batch; with cool-down)."""
    critical: float = Field(0.95, gt=0.0, le=1.0)
    """Share of the usable room at which it shrinks at once, cool-down or not, to the
    largest micro-batch predicted to fit."""
    hysteresis: float = Field(0.05, ge=0.0, lt=0.5)
    """A level is left only below its threshold minus this; shrinks aim below warn minus this."""
    grow_below: float = Field(0.75, gt=0.0, le=1.0)
    """Grow one notch (double) only while the larger micro-batch is predicted below this
    share of the usable room (from the measured peak at the current one)."""
    steady_steps: int = Field(5, ge=1)
    """Optimizer steps of steady headroom before a growth."""
    cooldown_steps: int = Field(10, ge=0)
    """Optimizer steps from any geometry change to a growth or a warn-level shrink."""
    retry_after_steps: int = Field(200, ge=0)
    """A micro-batch that failed (OOM, or shrunk away from under pressure) is not grown
    back into for this many optimizer steps, unless the usable room has grown since."""
    throughput_margin: float = Field(0.05, ge=0.0, lt=1.0)
    """Of two micro-batches that fit, the smaller is preferred only when measured faster by
    more than this fraction (samples/s, median of recent steps), and the larger is not
    grown into when measured slower by as much."""
    min_micro_batch: int = Field(1, ge=1)
    """Never shrink below this."""
    max_micro_batch: int | None = Field(None, ge=1)
    """Never grow above this; None: ``train.micro_batch``."""
    cpu_enforce: bool = False
    """CPU only: a forward that leaves the process's RSS over the budget raises MemoryError,
    standing in for the CUDA allocator's limit (so OOM recovery runs on the CPU)."""
    history_entries: int = Field(0, ge=0)
    """CUDA: allocator events PyTorch's memory history keeps (the ring of
    ``torch.cuda.memory._record_memory_history``); at each OOM its snapshot is written to
    ``RUN_DIR/oom/`` for https://pytorch.org/memory_viz. 0: off (recording costs per
    allocation, measured in bench/gpu_check.sh's oom-forensics stage). Ignored on the CPU."""
    snapshots_kept: int = Field(3, ge=1)
    """Allocator snapshots kept in ``RUN_DIR/oom/`` (the newest; each may be hundreds of MB)."""

    @model_validator(mode="after")
    def _budget_and_levels(self) -> MemoryConfig:
        fraction_over_one = isinstance(self.budget, float) and self.budget > 1
        if self.budget is not None and (self.budget <= 0 or fraction_over_one):
            raise ValueError(f"budget must be bytes (int > 1) or a fraction in (0, 1], got {self.budget!r}")
        if self.warn > self.critical:
            raise ValueError(f"warn ({self.warn}) must not exceed critical ({self.critical})")
        return self


class HardwareConfig(_Strict):
    """What memtui cannot read from the machine itself."""

    peak_tflops: float | None = Field(None, gt=0.0, le=1e6)
    """Peak dense TFLOP/s of one device at the run's precision, for MFU and ``memtui plan``;
    None: from memtui's table by the NVML device name, or (CPU) a matmul probe at start."""


class EvalConfig(StrictSection):
    """A held-out loss at a step boundary, on ``workload.eval_batch`` (the built-in and the
    Hugging Face workloads hold out the last 2% of their data).

    Cost: one eval is ``batches`` forward passes without gradients at the configured
    micro-batch, about a third of a training micro-step each: at the defaults about 2.7
    optimizer steps of time every 200 steps with one micro-step per step (~1.3% of the
    run), less with gradient accumulation. The eval's seconds are reported on the next
    step's sample (``eval_s``) and counted apart in ``memtui report``."""

    every_steps: int = Field(200, ge=0)
    """Evaluate after every N optimizer steps (when ``global_steps % N == 0``); 0 = never."""
    batches: int = Field(8, ge=1, le=100_000)
    """Held-out batches per eval (indices ``0 .. batches-1``, the same every time, so evals
    are comparable); with several ranks each rank takes its share and the loss is their mean."""


class MetricsConfig(StrictSection):
    """A ``/metrics`` endpoint for Prometheus, off by default. The figures are read from the
    supervisor's state when scraped (nothing is computed per step for it); serving them needs
    the optional ``prometheus-client`` (``pip install 'memtui[metrics]'``)."""

    port: int | None = Field(None, ge=1, le=65535)
    """TCP port of the endpoint; None = no endpoint. A port in use is an alert that names
    ``metrics.port``: the run goes on without metrics."""
    address: str = "127.0.0.1"
    """The address it binds: localhost unless another is given (``0.0.0.0`` = every interface)."""

    @field_validator("address")
    @classmethod
    def _an_ip_address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"metrics.address must be an IP address, got {value!r}") from None
        return value


class RunConfig(_Strict):
    """Everything a run needs, validated once at the edge and stored as ``run.json``."""

    name: str = Field("demo", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    """Human name; the run id is ``<name>-<timestamp>``."""
    preset: PresetName = "tiny"
    """Starting point for ``model`` and ``train``; explicit keys override it."""
    steps: int = Field(2000, ge=1, le=10**9)
    """Target optimizer steps."""
    seed: int = Field(1234, ge=0, le=2**31 - 1)
    """Seeds model init and the data order: batch (step, micro) is a function of (seed, step)."""
    log_every: int = Field(1, ge=1)
    """Report telemetry every N optimizer steps (the store keeps every report)."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    restart: RestartConfig = Field(default_factory=RestartConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    """What the supervisor does while the run's store cannot write."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """A held-out loss every ``eval.every_steps`` steps (``EvalConfig``)."""
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    """The supervisor's Prometheus endpoint (``MetricsConfig``); off by default."""
    chaos: ChaosConfig = Field(default_factory=ChaosConfig)
    """Scheduled chaos (``engine.chaos.table``): kinds and weights, mean interval, seed."""
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    alerts: AlertConfig = Field(default_factory=AlertConfig)
    """Alert thresholds, hardware reading intervals and the alert command."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """Directives: bounds, approval mode and planner."""
    hardware: HardwareConfig = Field(default_factory=HardwareConfig)
    """The device's peak throughput when the table does not know it."""
    workload: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """Optional ``module:function`` that builds a user's model and data (docs/your-model.md)."""
    workload_dir: str | None = None
    """Directory put first on ``sys.path`` to import ``workload``; defaults to the directory
    of the config file, or where ``memtui run`` was started."""
    deepspeed_config: dict[str, Any] | None = None
    """A user's DeepSpeed JSON config: passed through, except keys memtui owns."""
    hf: HfConfig = Field(default_factory=HfConfig)
    """A Hugging Face causal LM from a local directory and a local dataset (optional)."""

    @model_validator(mode="after")
    def _one_workload(self) -> RunConfig:
        if self.hf.model_dir is not None and self.workload is not None:
            raise ValueError("workload and hf.model_dir both name the model: choose one")
        if self.model.seq_len_start is not None and (self.hf.model_dir or self.workload):
            raise ValueError(
                "model.seq_len_start grows the built-in workload's data: not with workload or hf"
            )
        return self

    @model_validator(mode="after")
    def _nodes_share_checkpoints(self) -> RunConfig:
        if self.train.nodes > 1 and not self.checkpoint.dir:
            raise ValueError(
                "checkpoint.dir is needed with train.nodes > 1: a directory every node reaches "
                "at the same path (a shared filesystem)"
            )
        return self

    def thresholds(self) -> Thresholds:
        """The levels the console colours by, taken from the parts of the config that own them."""
        return Thresholds(
            memory_warn=self.memory.warn,
            memory_critical=self.memory.critical,
            loss_scale_floor=self.alerts.loss_scale_floor,
        )


PRESETS: dict[str, dict[str, Any]] = {
    # CPU demo: ~0.1M parameters, fast enough for >= 20 optimizer steps/s on 2 cores.
    "tiny": {
        "model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 128},
        "train": {"micro_batch": 8, "global_batch": 8, "lr": 3e-3, "min_lr": 3e-4},
    },
    # A few million parameters: a real GPU run or a patient CPU.
    "small": {
        "model": {"n_layer": 6, "n_head": 8, "d_model": 256, "seq_len": 256},
        "train": {"micro_batch": 16, "global_batch": 64, "lr": 1e-3, "min_lr": 1e-4},
    },
}

# Keys of a user's DeepSpeed config that memtui sets from RunConfig; a user's value for
# one of them would silently fight ours, so it is refused with the memtui key to use.
OWNED_DEEPSPEED_KEYS: dict[str, str] = {
    "train_batch_size": "train.global_batch",
    "train_micro_batch_size_per_gpu": "train.micro_batch",
    "gradient_accumulation_steps": "train.global_batch / train.micro_batch",
    "fp16.enabled": "train.precision",
    "bf16.enabled": "train.precision",
    "fp16.initial_scale_power": "train.initial_scale_power",
    "zero_optimization.stage": "train.zero_stage",
    "gradient_clipping": "train.grad_clip",
}
