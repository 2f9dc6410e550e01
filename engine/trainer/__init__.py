"""The trainer: the only package that imports torch and DeepSpeed. The training loop and its
workloads, adaptive memory (probe, controller, OOM recovery), checkpoint I/O, rank agreement
and chaos hooks; rank 0 reports to the supervisor through ``link``. Never imports textual.
"""
