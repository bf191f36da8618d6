"""Zones `dlrun catalog refresh` read, for the backends' launch order (stdlib only):

    gcp_region_zones()  region -> its zones (regions.list), for regions DEFAULT_ZONES lacks
    gcp_gpu_zones()     (GPU, region) -> the zones that offer it (acceleratorTypes aggregated list),
                        the refreshed counterpart of configs/catalog/gcp_gpu_zones.csv

Not yet read by infra/gcp/ (owned by the GCP backend); see the issue 25 report for the two lines there.
"""
from __future__ import annotations

import csv

from infra.paths import refresh_dir
from infra.refresh import cache


def gcp_region_zones() -> dict[str, list[str]]:
    unit = cache.load("gcp", "specs").get("zones")
    return {r["region"]: list(r["zones"]) for r in unit.rows} if unit and unit.fetched_at else {}


_GPU_ZONES: dict = {}  # path -> (mtime, table): the plan asks once per offer


def gcp_gpu_zones() -> dict[tuple[str, str], list[str]]:
    path = refresh_dir() / "gcp_gpu_zones.csv"
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return {}
    cached = _GPU_ZONES.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    with open(path, newline="") as f:
        table = {(r["accelerator"], r["region"]): r["zones"].split() for r in csv.DictReader(f)}
    _GPU_ZONES[path] = (mtime, table)
    return table
