"""The supervisor: the asyncio process that is the run, torch-free. It owns the run directory
and its journal of events (stored before sent); below this level, by concept: ``trainers``
(launching and restarting attempts), ``channel`` (the Unix socket and its consoles),
``intake`` (what the trainer reports), ``hangs``, ``chaos``, ``metrics`` and ``rendezvous``.
"""
