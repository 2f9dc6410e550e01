"""What a run's store says when read back: its status, throughput, evals, the workload's
metrics, the directives by who decided them, what failures cost, the endurance report."""
