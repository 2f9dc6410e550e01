"""Checkpoints of a run, torch-free: the manifest and catalog of what was saved, which one a
restart resumes from (selection), the durable store with rotation, and the background sealer
that verifies a save before it counts.
"""
