"""Which markets GCP sells a machine type in, where that is not "on demand and spot" (configs/catalog/
gcp_markets.csv, with its source). a3-highgpu-1g/2g/4g (A3 High with 1, 2 or 4 H100s) are sold only as
Spot VMs or through Flex-start (Dynamic Workload Scheduler) / calendar-mode reservations, never as standard
on-demand VMs; dlrun uses neither Flex-start nor reservations, so for dlrun they are spot only.

The provider marks such offers (offer.extra["markets"]) and refuses to launch them in a market GCP does not
sell, before anything is made; the planner does not plan that market at all (planner.markets asks
infra.catalog.sold_markets)."""
from __future__ import annotations

from infra.catalog import Offer, sold_markets as catalog_sold_markets


def sold_markets(instance_type: str) -> tuple[str, ...] | None:
    """("spot",) for a spot-only machine type; None when GCP sells it on demand and as spot."""
    return catalog_sold_markets(Offer(cloud="gcp", region="", instance_type=instance_type, accelerator=None,
                                      accelerator_count=0, gpu_memory_gb=0, vcpus=0, memory_gb=0,
                                      price_per_hour=0.0, spot_price_per_hour=None))
