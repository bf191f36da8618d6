"""`dlrun catalog refresh`: newer AWS spot prices from describe_spot_price_history.

For each instance type of the catalog in a region it keeps the latest price of every availability
zone, then the cheapest zone (the catalog's convention), with that price's own date. The result
goes to $DLRUN_HOME/spot_prices.csv, which catalog.load_offers applies over the shipped catalog.
"""
from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

from infra.catalog import load_offers
from orchestrator.state.db import dlrun_home

FIELDS = ["cloud", "region", "instance_type", "spot_price_per_hour", "price_date", "zone", "fetched_at"]


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
    """instance type -> {price, date, zone}: latest price per zone, cheapest zone wins."""
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
    best: dict[str, dict] = {}
    for (itype, zone), rec in latest.items():
        price = float(rec["SpotPrice"])
        if itype not in best or price < best[itype]["price"]:
            ts = rec["Timestamp"]
            date = ts.date().isoformat() if hasattr(ts, "date") else str(ts)[:10]
            best[itype] = {"price": price, "date": date, "zone": zone}
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
                  "price_date": b["date"], "zone": b["zone"], "fetched_at": fetched_at} for t, b in best.items()]
    _merge(rows)
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
