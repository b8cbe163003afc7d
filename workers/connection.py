"""The driver's connection to Ray: a cluster at an address, or an embedded local instance."""

from __future__ import annotations

import logging
import os
from typing import Any

import ray


class RayConnection:
    """Connect to a Ray cluster (``address``) or start an embedded local instance.

    Use as a context manager; a local instance started here is shut down on exit.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.started = False

    def __enter__(self) -> RayConnection:
        if ray.is_initialized():
            return self
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kwargs: dict[str, Any] = {
            "logging_level": logging.ERROR,
            "log_to_driver": False,
            "include_dashboard": False,
        }
        if self.address:
            ray.init(address=self.address, **kwargs)
        else:
            # "local": always a private instance, even when a `ray start` cluster runs on
            # this machine (a bare init would join it)
            ray.init(address="local", num_cpus=self.num_cpus or os.cpu_count() or 1, **kwargs)
            self.started = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            ray.shutdown()
            self.started = False

    @staticmethod
    def cpus() -> int:
        """CPUs the connected cluster offers (at least 1)."""
        return max(1, int(ray.cluster_resources().get("CPU", 1)))
