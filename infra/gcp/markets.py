"""Which markets GCP sells a machine type in, where that is not "on demand and spot" (configs/catalog/
gcp_markets.csv, with its source). a3-highgpu-1g/2g/4g (A3 High with 1, 2 or 4 H100s) are sold only as
Spot VMs or through Flex-start (Dynamic Workload Scheduler) / calendar-mode reservations, never as standard
on-demand VMs; dlrun uses neither Flex-start nor reservations, so for dlrun they are spot only.

The provider marks such offers (offer.extra["markets"]) and refuses to launch them in a market GCP does not
sell, before anything is made; the planner should not plan that market at all (see the README of
configs/catalog)."""
from __future__ import annotations

import csv
import os
from functools import lru_cache
from pathlib import Path

from configs import CATALOG_DIR

TABLE = "gcp_markets.csv"


@lru_cache(maxsize=4)
def _table(catalog_dir: Path) -> dict[str, tuple[str, ...]]:
    path = catalog_dir / TABLE
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {r["instance_type"]: tuple(r["markets"].split()) for r in csv.DictReader(f)}


def sold_markets(instance_type: str) -> tuple[str, ...] | None:
    """("spot",) for a spot-only machine type; None when GCP sells it on demand and as spot."""
    catalog_dir = Path(os.environ.get("DLRUN_CATALOG_DIR") or CATALOG_DIR)
    return _table(catalog_dir).get(instance_type)
