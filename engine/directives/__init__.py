"""Directives: what a planner or the operator proposes to change in a run, the policy that
allows, clamps or rejects it, the queue that carries it to the trainer and watches its
effect, and the planners (rules, a command, an OpenAI-compatible endpoint). Torch-free.
"""
