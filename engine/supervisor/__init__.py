"""The supervisor: the asyncio process that is the run, torch-free. It owns the run directory,
launches and restarts the trainer, keeps the journal of events (stored before sent), serves
consoles over the Unix socket, and wires in the policy, planner, chaos and alerts.
"""
