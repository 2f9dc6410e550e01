"""The engine of a memtui run: the contract both sides share at this top level, torch-free
(``domain`` types, ``config``, ``wire``, ``measures``, ``events``, ``chaos`` kinds), and below
it the packages by capability, layered as docs/architecture.md draws them (run, checkpoints,
memory, directives, doctor, alerts, then the supervisor and the trainer), each importing only
the ones below it.
"""
