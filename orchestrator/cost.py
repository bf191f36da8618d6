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


def usd(amount: float, places: int = 2) -> str:
    """dlrun's one way to write money: $0, $0.0012 (under a cent: two significant digits, never '$0.00' or
    '<$0.01'), $12.50, $36,000; `places` more decimals where two amounts must read apart (usd_apart)."""
    import math

    if amount == 0:
        return "$0"
    if abs(amount) < 10 ** -places:  # two significant digits, a trailing zero dropped: $0.0001
        places = min(8, -math.floor(math.log10(abs(amount))) + 1)
        return f"${amount:,.{places}f}".rstrip("0")
    if abs(amount) >= 1000 and places == 2:
        return f"${amount:,.0f}"
    return f"${amount:,.{places}f}"


def usd_apart(a: float, b: float) -> tuple[str, str]:
    """Two amounts with the decimals that tell them apart when they differ ($0.0213 > $0.0200, never
    '$0.02 > $0.02'), two at least."""
    for places in range(2, 9):
        shown = usd(a, places), usd(b, places)
        if a == b or shown[0] != shown[1]:
            return shown
    return shown
