"""The run directory and what lives in it, torch-free: its layout and metadata, the SQLite
telemetry store (steps, events, decisions), the run's status, and launching a detached
supervisor for it.
"""
