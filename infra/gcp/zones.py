"""Which zones of a region can run an offer: the GPU zone table (configs/catalog/gcp_gpu_zones.csv).

A zone that lacks the accelerator answers the insert with "was not found" / "does not exist in zone";
the table keeps dlrun from trying such zones at all. GPUs the table does not list are tried everywhere
(the launch moves on to the next zone when GCE says no).
"""
from __future__ import annotations

import csv
import os
from functools import lru_cache
from pathlib import Path

from configs import CATALOG_DIR
from infra.catalog import Offer

TABLE = "gcp_gpu_zones.csv"


@lru_cache(maxsize=4)
def _table(catalog_dir: Path) -> dict[tuple[str, str], list[str]]:
    path = catalog_dir / TABLE
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {(r["accelerator"], r["region"]): r["zones"].split() for r in csv.DictReader(f)}


def gpu_zones(accelerator: str, region: str) -> list[str] | None:
    """The zones of region that offer accelerator, or None when the table does not say."""
    from infra.refresh.zones import gcp_gpu_zones  # what `dlrun catalog refresh` read, first

    catalog_dir = Path(os.environ.get("DLRUN_CATALOG_DIR") or CATALOG_DIR)
    return gcp_gpu_zones().get((accelerator, region)) or _table(catalog_dir).get((accelerator, region))


def zones_for(offer: Offer, region_zones: list[str]) -> list[str]:
    """region_zones (dlrun's order) less those the table says lack the offer's GPU."""
    offered = gpu_zones(offer.accelerator, offer.region) if offer.accelerator else None
    return region_zones if offered is None else [z for z in region_zones if z in offered]
