"""`dlrun catalog refresh` and the plan's reads of the clouds' APIs: quotas (quota_book), and newer AWS
spot prices from describe_spot_price_history (refresh_spot_prices).

Quotas: the regions a plan's offers are in are read again where the cache is older than the lifetime
the caller gives (a plan: an hour; a launch: LAUNCH_QUOTA_AGE_S), all regions in parallel threads.

For each instance type of the catalog in a region it keeps the latest price of every availability
zone, with its own date. Every zone goes to $DLRUN_HOME/spot_zones.csv (infra/spot_zones.py ranks
them: far-below-the-others zones are flagged); the zone dlrun launches in first sets the region's
price in $DLRUN_HOME/spot_prices.csv. catalog.load_offers applies both over the shipped catalog.
"""
from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

from concurrent.futures import ThreadPoolExecutor

from infra.catalog import load_offers
from infra.refresh import aws_quotas, cache, gcp_quotas
from infra.refresh.clients import (AwsClients, GcpClients, aws_credentials_configured,
                                   gcp_credentials_configured)
from infra.refresh.quotas import GLOBAL, QuotaBook
from infra.spot_zones import FIELDS as ZONE_FIELDS, ZonePrice, home_zone_prices_path, rank
from orchestrator.state.db import dlrun_home

WORKERS = 16
FIELDS = ["cloud", "region", "instance_type", "spot_price_per_hour", "price_date", "zone", "fetched_at"]


# ---- quotas -----------------------------------------------------------------------------------------

def quota_book(regions: dict[str, set[str]], *, max_age_s: float | None = None, aws=None, gcp=None,
               progress=None, fetch: bool = True) -> QuotaBook:
    """The quotas of these (cloud -> regions), read again where older than max_age_s (default: the kind's
    lifetime), in parallel. A cloud without credentials is "not checked", with the reason."""
    book = QuotaBook()
    jobs: list[tuple[str, list[str]]] = []
    for cloud, wanted in regions.items():
        if cloud not in ("aws", "gcp") or not wanted:
            continue
        units = cache.load(cloud, "quotas")
        need = set(wanted) | ({GLOBAL} if cloud == "gcp" else set())
        for r in need:
            if r in units:
                book.units[(cloud, r)] = units[r]
        stale = sorted(r for r in need if r not in units or not units[r].fresh(max_age_s))
        if not stale or not fetch:
            continue
        why_not = aws_credentials_configured() if cloud == "aws" else gcp_credentials_configured()
        if why_not:
            book.unchecked[cloud] = why_not
        else:
            jobs.append((cloud, stale))
    if not jobs:
        return book
    if progress:
        progress("reading quotas: " + ", ".join(f"{c} {len(rs)} region{'s' if len(rs) != 1 else ''}"
                                                for c, rs in jobs))
    futures = []
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for cloud, stale in jobs:
            if cloud == "aws":
                aws = aws or AwsClients()
                futures += [(cloud, pool.submit(lambda r=r, c=aws: {r: aws_quotas.read_region(c, r)}))
                            for r in stale]
                continue
            gcp = gcp or GcpClients()
            regional = [r for r in stale if r != GLOBAL]
            if regional:
                futures.append((cloud, pool.submit(gcp_quotas.read_regions, gcp, regional)))
            if GLOBAL in stale:
                futures.append((cloud, pool.submit(lambda c=gcp: {GLOBAL: gcp_quotas.read_project(c)})))
        results: dict[str, dict[str, cache.Unit]] = {}
        for cloud, f in futures:
            results.setdefault(cloud, {}).update(f.result())
    for cloud, fresh in results.items():
        merged = cache.save(cloud, "quotas", fresh)
        for region in fresh:
            book.units[(cloud, region)] = merged[region]
    return book


# ---- spot prices (AWS) ------------------------------------------------------------------------------

def spot_prices_path() -> Path:
    return dlrun_home() / "spot_prices.csv"


def _aws_regions_and_types(regions: list[str] | None) -> dict[str, list[str]]:
    wanted: dict[str, list[str]] = {}
    for o in load_offers(spot_overrides=Path("/nonexistent")):
        if o.cloud == "aws" and (not regions or o.region in regions):
            wanted.setdefault(o.region, [])
            if o.instance_type not in wanted[o.region]:
                wanted[o.region].append(o.instance_type)
    for r in regions or []:
        wanted.setdefault(r, [])
    return wanted


def fetch_region(client, instance_types: list[str], now: dt.datetime | None = None) -> dict[str, dict]:
    """instance type -> {price, date, zone, zones}: latest price per zone; the launch zone's sets the price."""
    now = now or dt.datetime.now(dt.timezone.utc)
    latest: dict[tuple[str, str], dict] = {}
    pages = client.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=instance_types, ProductDescriptions=["Linux/UNIX"],
        StartTime=now - dt.timedelta(days=1), EndTime=now)
    for page in pages:
        for rec in page.get("SpotPriceHistory", []):
            if not rec.get("ProductDescription", "").startswith("Linux/UNIX"):
                continue
            key = (rec["InstanceType"], rec["AvailabilityZone"])
            if key not in latest or rec["Timestamp"] > latest[key]["Timestamp"]:
                latest[key] = rec
    zones: dict[str, dict[str, dict]] = {}
    for (itype, zone), rec in latest.items():
        ts = rec["Timestamp"]
        date = ts.date().isoformat() if hasattr(ts, "date") else str(ts)[:10]
        zones.setdefault(itype, {})[zone] = {"price": float(rec["SpotPrice"]), "date": date, "zone": zone}
    best: dict[str, dict] = {}
    for itype, by_zone in zones.items():
        ranking = rank([ZonePrice(z["zone"], z["price"], z["date"]) for z in by_zone.values()])
        best[itype] = {**by_zone[ranking.launch_zone.zone], "zones": list(by_zone.values())}
    return best


def refresh_spot_prices(regions: list[str] | None = None, *, session=None) -> list[dict]:
    """Query AWS for every catalog region (or `regions`), merge into spot_prices.csv, return new rows."""
    from orchestrator.errors import CloudCredentialsError

    import boto3
    from botocore.exceptions import ClientError, NoCredentialsError

    session = session or boto3.session.Session()
    fetched_at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows: list[dict] = []
    for region, types in _aws_regions_and_types(regions).items():
        if not types:
            continue
        client = session.client("ec2", region_name=region)
        try:
            best = fetch_region(client, types)
        except NoCredentialsError:
            raise CloudCredentialsError("AWS credentials not found; configure them (aws configure) "
                                        "to refresh spot prices") from None
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId"):
                raise CloudCredentialsError(f"AWS refused the spot price query in {region} ({code}); "
                                            "check your credentials") from None
            raise
        rows += [{"cloud": "aws", "region": region, "instance_type": t, "spot_price_per_hour": b["price"],
                  "price_date": b["date"], "zone": b["zone"], "fetched_at": fetched_at, "zones": b["zones"]}
                 for t, b in best.items()]
    _merge(rows)
    _merge_zones(rows)
    return rows


def _merge(rows: list[dict]) -> None:
    path = spot_prices_path()
    existing: dict[tuple, dict] = {}
    if path.exists():
        with open(path, newline="") as f:
            existing = {(r["cloud"], r["region"], r["instance_type"]): r for r in csv.DictReader(f)}
    for r in rows:
        existing[(r["cloud"], r["region"], r["instance_type"])] = r
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(sorted(existing.values(), key=lambda r: (r["cloud"], r["region"], r["instance_type"])))
    tmp.replace(path)


def _merge_zones(rows: list[dict]) -> None:
    """Every zone's price of the refreshed types, replacing what was known of those types."""
    path = home_zone_prices_path()
    refreshed = {(r["cloud"], r["region"], r["instance_type"]) for r in rows}
    kept: list[dict] = []
    if path.exists():
        with open(path, newline="") as f:
            kept = [r for r in csv.DictReader(f) if (r["cloud"], r["region"], r["instance_type"]) not in refreshed]
    new = [{"cloud": r["cloud"], "region": r["region"], "instance_type": r["instance_type"], "zone": z["zone"],
            "spot_price_per_hour": z["price"], "price_date": z["date"], "source": "describe_spot_price_history"}
           for r in rows for z in r["zones"]]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ZONE_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(sorted(kept + new, key=lambda r: (r["cloud"], r["region"], r["instance_type"], r["zone"])))
    tmp.replace(path)
