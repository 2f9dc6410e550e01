"""What the trainer reports: per-step telemetry and workload scalars, every rank's memory
and pace, MFU, evals and the start-up phases."""
