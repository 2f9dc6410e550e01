"""Figures as every side reads and writes them: bytes, the memory scale, free disk, MFU's
ceiling, throughput, the newest eval and a workload's own scalars. Torch-free."""
