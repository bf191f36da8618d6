"""The refresh cache: $DLRUN_HOME/catalog/<cloud>-<kind>.json, one entry ("unit") per region.

A unit is what one source returned for one region (or "global"): its rows, when they were fetched, from
which API, and the error of the last try when it failed. A failed try never replaces rows: the previous
ones stay, with their own fetch time, and the error says why they were not renewed. Each kind has a
lifetime after which the plan reads it again (LIFETIME_S): specs change rarely, spot prices and quotas
often (a quota changes when an increase is granted).
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra.paths import refresh_dir

HOUR = 3600.0
LIFETIME_S = {
    "specs": 7 * 24 * HOUR,      # instance / machine / accelerator types and their GPUs
    "offerings": 24 * HOUR,      # where each type is sold (zones)
    "ondemand": 24 * HOUR,       # on-demand list prices
    "spot": HOUR,                # spot prices (AWS: per zone)
    "quotas": HOUR,              # limits and usage; re-read just before a launch (LAUNCH_QUOTA_AGE_S)
}
LAUNCH_QUOTA_AGE_S = 120.0       # a launch plans with quotas read at most this long ago
RETRY_AFTER_S = 300.0            # a source that failed is not tried again by a plan for this long (offline,
                                 # throttled: each plan would otherwise wait for it again)
_lock = threading.Lock()


@dataclass
class Unit:
    cloud: str
    kind: str
    region: str                  # "global" for account-wide data
    fetched_at: float = 0.0      # epoch seconds of the rows (0: never fetched)
    source: str = ""             # the API call(s) the rows came from
    rows: list = field(default_factory=list)
    error: str = ""              # why the last try failed ("" when it did not)
    tried_at: float = 0.0

    def age_s(self, now: float | None = None) -> float:
        return (now or time.time()) - self.fetched_at if self.fetched_at else float("inf")

    def failed_recently(self, now: float | None = None) -> bool:
        return bool(self.error) and (now or time.time()) - self.tried_at < RETRY_AFTER_S

    def fresh(self, max_age_s: float | None = None, now: float | None = None) -> bool:
        return self.age_s(now) <= (LIFETIME_S[self.kind] if max_age_s is None else max_age_s)


def path(cloud: str, kind: str) -> Path:
    return refresh_dir() / f"{cloud}-{kind}.json"


def load(cloud: str, kind: str) -> dict[str, Unit]:
    p = path(cloud, kind)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    return {region: Unit(**u) for region, u in data.get("units", {}).items()}


def save(cloud: str, kind: str, results: dict[str, Unit]) -> dict[str, Unit]:
    """Merge fresh results into the cache; a failed result keeps the previous rows. Returns the merged."""
    with _lock:
        units = load(cloud, kind)
        for region, new in results.items():
            old = units.get(region)
            if new.error and old is not None and old.fetched_at:
                old.error, old.tried_at = new.error, new.tried_at or time.time()
            else:
                units[region] = new
        p = path(cloud, kind)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"cloud": cloud, "kind": kind,
                                   "units": {r: asdict(u) for r, u in sorted(units.items())}}))
        tmp.replace(p)
        return units


def stamp(ts: float) -> str:
    """An epoch time as ISO 8601 UTC (what the plan and `catalog` print)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else "never"


def age_words(seconds: float) -> str:
    if seconds == float("inf"):
        return "never fetched"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * HOUR:
        return f"{seconds / HOUR:.0f} h"
    return f"{seconds / (24 * HOUR):.0f} days"
