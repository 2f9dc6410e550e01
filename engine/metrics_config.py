"""``[metrics]``: the port on which the supervisor serves Prometheus/OpenMetrics text.
Re-exported by ``engine.config``, where ``RunConfig`` holds it. Torch-free.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from engine.oversight_config import StrictSection


class MetricsConfig(StrictSection):
    """A ``/metrics`` endpoint for Prometheus, off by default. The figures are read from the
    supervisor's state when scraped (nothing is computed per step for it); serving them needs
    the optional ``prometheus-client`` (``pip install 'memtui[metrics]'``)."""

    port: int | None = Field(None, ge=1, le=65535)
    """TCP port of the endpoint; None = no endpoint. A port in use is an alert that names
    ``metrics.port``: the run goes on without metrics."""
    address: str = "127.0.0.1"
    """The address it binds: localhost unless another is given (``0.0.0.0`` = every interface)."""

    @field_validator("address")
    @classmethod
    def _an_ip_address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"metrics.address must be an IP address, got {value!r}") from None
        return value
