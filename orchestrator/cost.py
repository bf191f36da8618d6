"""Money accrued by a cluster: node-seconds × the hourly price stored at launch. The one formula."""
from __future__ import annotations


def node_seconds_cost(price_per_hour_all_nodes: float, start: float, stop: float) -> float:
    """What a cluster costs from start to stop (never negative: a clock skew bills nothing)."""
    return max(0.0, stop - start) * price_per_hour_all_nodes / 3600.0


class CostMeter:
    """Accrued cost of a job = what earlier attempts cost + the running cluster's node-seconds so far."""

    def __init__(self, previous: float, price_per_hour_all_nodes: float, start: float):
        self.previous, self.price, self.start = previous, price_per_hour_all_nodes, start

    def accrued(self, now: float) -> float:
        return self.previous + node_seconds_cost(self.price, self.start, now)
