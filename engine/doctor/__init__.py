"""The environment doctor: what this machine offers a run (GPUs through NVML, host memory and
disk through psutil, DeepSpeed's ops), with a verdict and reasons. Torch is imported only in a
child process, so the supervisor stays torch-free.
"""
