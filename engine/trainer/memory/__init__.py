"""The trainer's memory: the readings (probe, NVML, the forward's RSS, the host heap), the
adaptive controller with its geometry changes and the fp16 loss-scale floor, what an
out-of-memory error leaves and undoes, and the pressure a rehearsal injects into that path
(ballast, injected OOMs)."""
