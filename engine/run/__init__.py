"""The run directory and what lives in it, torch-free: its layout and metadata, ownership,
launching a detached supervisor, the files a crash or a hang leaves; below it ``storage``
(the SQLite store of steps, events and decisions) and ``reports`` (what the store says when
read back: status, throughput, endurance).
"""
