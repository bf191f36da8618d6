"""Spot prices per availability zone: which zone dlrun launches in first, and which zones look wrong.

A region's spot price used to be its cheapest zone's, outliers included (p4d.24xlarge us-east-1:
$2.47/h in use1-az1 against $7.88–8.19/h in the others), so the plan priced capacity that is rarely
there. Here a zone whose price is below OUTLIER_SHARE of the median of the region's other zones is
an outlier: it is tried last and never sets the estimate. The estimate prices the first zone of the
launch order (the cheapest regular zone), and infra/vm/provider.py launches in that same order.

Only AWS has rows here. GCP sets a Spot VM price per region, the same in each of its zones (every
zone of a region carries the same SpotPrice in skypilot-catalog catalogs/v8/gcp/vms.csv @006059e0;
Google's SKU list, https://cloud.google.com/skus: "Spot prices are dynamic and can change up to once
every 30 days"), so a GCP estimate's regional price already is the price of the zone it launches in.

Data: configs/catalog/spot_zones.csv (shipped, zone IDs such as use1-az1), replaced per instance type
by $DLRUN_HOME/spot_zones.csv, which `dlrun catalog refresh` writes (zone names such as us-east-1a).
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from configs import CATALOG_DIR
from infra.paths import dlrun_home

OUTLIER_SHARE = 0.5
FIELDS = ["cloud", "region", "instance_type", "zone", "spot_price_per_hour", "price_date", "source"]


@dataclass(frozen=True)
class ZonePrice:
    zone: str
    price: float
    date: str = ""


@dataclass(frozen=True)
class ZoneRanking:
    order: tuple[ZonePrice, ...]      # launch order: regular zones cheapest first, then the outliers
    outliers: tuple[ZonePrice, ...]
    median_others: dict[str, float]   # outlier zone -> median of the other zones' prices

    @property
    def launch_zone(self) -> ZonePrice:
        return self.order[0]


def home_zone_prices_path() -> Path:
    return dlrun_home() / "spot_zones.csv"


def _read(path: Path) -> dict[tuple[str, str, str], list[ZonePrice]]:
    out: dict[tuple[str, str, str], list[ZonePrice]] = {}
    if not path.exists():
        return out
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("spot_price_per_hour") in ("", None):
                continue
            out.setdefault((r["cloud"], r["region"], r["instance_type"]), []).append(
                ZonePrice(r["zone"], float(r["spot_price_per_hour"]), r.get("price_date", "")))
    return out


def zone_prices(catalog_dir: Path | None = None) -> dict[tuple[str, str, str], list[ZonePrice]]:
    """(cloud, region, instance type) -> the spot price of every zone known for it."""
    prices = _read(Path(catalog_dir or CATALOG_DIR) / "spot_zones.csv")
    prices.update(_read(home_zone_prices_path()))  # a refresh replaces a type's zones as a whole
    return prices


def rank(prices: list[ZonePrice]) -> ZoneRanking:
    outliers, medians = [], {}
    for z in prices:
        others = [o.price for o in prices if o is not z]
        if others:
            median = statistics.median(others)
            if z.price < OUTLIER_SHARE * median:
                outliers.append(z)
                medians[z.zone] = median
    regular = sorted((z for z in prices if z not in outliers), key=lambda z: (z.price, z.zone))
    return ZoneRanking(tuple(regular + sorted(outliers, key=lambda z: (z.price, z.zone))), tuple(outliers),
                       medians)


def launch_order(zones: list[str], ranking: ZoneRanking | None, aliases: dict[str, str] | None = None) -> list[str]:
    """The cloud's zones in the order a spot launch tries them: the ranking's regular zones, then the
    zones without a known price, then the outliers. `aliases` maps a zone name to its ID (AWS)."""
    if ranking is None:
        return list(zones)
    aliases = aliases or {}
    outlier_ids = {z.zone for z in ranking.outliers}
    position = {z.zone: i for i, z in enumerate(ranking.order)}

    def key(name: str):
        ident = name if name in position else aliases.get(name, name)
        if ident in outlier_ids:
            return (2, position[ident], name)
        if ident in position:
            return (0, position[ident], name)
        return (1, 0, name)

    return sorted(zones, key=key)


def outlier_note(offer_label: str, ranking: ZoneRanking) -> str:
    """One line for the plan: which zone is flagged, what was priced instead."""
    flagged = ", ".join(f"{z.zone} ${z.price:.2f}/h (others' median ${ranking.median_others[z.zone]:.2f}/h)"
                        for z in ranking.outliers)
    lz = ranking.launch_zone
    return (f"{offer_label} spot: {flagged} is far below the region's other zones; "
            f"priced at {lz.zone} ${lz.price:.2f}/h, the flagged zone is tried last")
