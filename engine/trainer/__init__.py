"""The trainer: the only package that imports torch and DeepSpeed. The training loop at
this level; below it, by concept: ``workloads`` (what is trained), ``memory`` (readings and
adaptive memory), ``ranks``, ``telemetry``, ``checkpoints`` and ``chaos``. Rank 0 reports
to the supervisor through ``link``. Never imports textual.
"""
