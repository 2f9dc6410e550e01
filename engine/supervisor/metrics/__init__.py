"""The run's ``/metrics`` for Prometheus: the figures of one scrape, their families, the
endpoint that serves them."""
