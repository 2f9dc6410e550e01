"""Memory of a run, torch-free and pure: the budget, the predictive model of a step's peak per
micro-batch, the capacity plan, and the adaptive controller's decisions (``controller``) on
the one scale of ``engine.measures.memory_scale`` (a share of the usable room).
"""
