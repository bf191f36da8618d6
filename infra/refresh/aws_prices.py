"""AWS prices and offers from AWS's own APIs, per region (boto3; every call paged):

    specs      ec2:DescribeInstanceTypes   vCPUs, memory, architecture, GpuInfo (name, count, memory):
                                           a new GPU type appears here without a code change
    offerings  ec2:DescribeInstanceTypeOfferings (LocationType availability-zone): where each type is sold
    ondemand   pricing:GetProducts (Price List Query API, served from us-east-1): Linux, Shared tenancy,
               no pre-installed software, capacitystatus Used; price at terms.OnDemand.*.priceDimensions.*
               .pricePerUnit.USD where unit is "Hrs" (awscli examples/pricing/get-products.rst)
    spot       ec2:DescribeSpotPriceHistory (ProductDescriptions Linux/UNIX): the latest price of every zone

dlrun plans x86_64 types with an NVIDIA GPU from AWS's G and P families (instance-type filter "g*", "p*":
a new generation such as p6 or g7 appears without a code change), and the CPU types in CPU_TYPES.
"""
from __future__ import annotations

import datetime as dt
import json

from infra.refresh.answers import ShapeError, need, number
from infra.refresh.bounds import read_unit
from infra.refresh.cache import Unit

CPU_TYPES = ("c7i.large", "c7i.xlarge", "m7i.large", "m7i.xlarge")
PRICE_FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}


def enabled_regions(clients, home: str = "us-east-1") -> list[str]:
    """The regions this account has enabled (describe_regions without AllRegions); raises on a failed or
    wrong-shaped answer (there is always at least the home region)."""
    answer = clients.client("ec2", home).describe_regions()
    regions = need(answer, "Regions", list, "ec2:DescribeRegions")
    if not regions or not all(isinstance(r, dict) and isinstance(r.get("RegionName"), str) for r in regions):
        raise ShapeError("ec2:DescribeRegions answered no region, or a region without a RegionName")
    return sorted(r["RegionName"] for r in regions
                  if r.get("OptInStatus", "opt-in-not-required") in ("opt-in-not-required", "opted-in"))


def read_specs(clients, region: str) -> Unit:
    return read_unit("aws", "specs", region, "ec2:DescribeInstanceTypes", clients.deadline(),
                     lambda: _specs(clients, region))


def _specs(clients, region: str) -> list[dict]:
    what = "ec2:DescribeInstanceTypes"
    rows = []
    pages = clients.client("ec2", region).get_paginator("describe_instance_types").paginate(
        Filters=[{"Name": "instance-type", "Values": ["g*", "p*", *CPU_TYPES]},
                 {"Name": "processor-info.supported-architecture", "Values": ["x86_64"]}])
    for page in pages:
        for t in need(page, "InstanceTypes", list, what):
            archs = (t.get("ProcessorInfo") or {}).get("SupportedArchitectures", [])
            gpus = [g for g in (t.get("GpuInfo") or {}).get("Gpus", []) if g.get("Manufacturer") == "NVIDIA"]
            if any(g.get("GpuPartitionSize", 1.0) < 1.0 for g in gpus):
                continue  # a fraction of a GPU (g6f): not a GPU dlrun can plan a job on
            name = need(t, "InstanceType", str, what)
            if "x86_64" not in archs or not (gpus or name in CPU_TYPES):
                continue
            row = {"type": name, "vcpus": int(number((t.get("VCpuInfo") or {}).get("DefaultVCpus"),
                                                     f"{what} {name} VCpuInfo.DefaultVCpus")),
                   "memory_gb": round(number((t.get("MemoryInfo") or {}).get("SizeInMiB"),
                                             f"{what} {name} MemoryInfo.SizeInMiB") / 1024, 2)}
            if gpus:
                row.update(gpu=need(gpus[0], "Name", str, f"{what} {name} GpuInfo"),
                           gpu_count=sum(int(g.get("Count", 0)) for g in gpus),
                           gpu_mib=(gpus[0].get("MemoryInfo") or {}).get("SizeInMiB", 0))
            rows.append(row)
    return rows


def read_offerings(clients, region: str, types: set[str]) -> Unit:
    return read_unit("aws", "offerings", region, "ec2:DescribeInstanceTypeOfferings", clients.deadline(),
                     lambda: _offerings(clients, region, types))


def _offerings(clients, region: str, types: set[str]) -> list[dict]:
    what = "ec2:DescribeInstanceTypeOfferings"
    zones: dict[str, list[str]] = {}
    pages = clients.client("ec2", region).get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone")
    for page in pages:
        for o in need(page, "InstanceTypeOfferings", list, what):
            if need(o, "InstanceType", str, what) in types:
                zones.setdefault(o["InstanceType"], []).append(need(o, "Location", str, what))
    return [{"type": t, "zones": sorted(z)} for t, z in sorted(zones.items())]


def _on_demand_price(item: dict) -> float | None:
    for term in (item.get("terms") or {}).get("OnDemand", {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            if dim.get("unit") == "Hrs" and "USD" in (dim.get("pricePerUnit") or {}):
                return float(dim["pricePerUnit"]["USD"])
    return None


def read_ondemand(clients, region: str, types: set[str] | None = None) -> Unit:
    """On-demand Linux prices of the region (every type, or `types`) from the Price List Query API."""
    return read_unit("aws", "ondemand", region, "pricing:GetProducts", clients.deadline(),
                     lambda: _ondemand(clients, region, types))


def _ondemand(clients, region: str, types: set[str] | None) -> list[dict]:
    what = "pricing:GetProducts"
    pricing = clients.client("pricing", clients.pricing_region)
    filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v}
               for f, v in {"regionCode": region, **PRICE_FILTERS}.items()]
    rows, items = [], 0
    for page in pricing.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2", FormatVersion="aws_v1", Filters=filters, PaginationConfig={"PageSize": 100}):
        for raw in need(page, "PriceList", list, what):
            items += 1
            try:
                item = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                raise ShapeError(f"{what} answered a PriceList item that is not JSON") from None
            if not isinstance(item, dict) or not isinstance(item.get("product"), dict):
                raise ShapeError(f"{what} answered a PriceList item without a product")
            itype = (item["product"].get("attributes") or {}).get("instanceType")
            price = _on_demand_price(item)
            if not itype or price is None or price <= 0 or (types is not None and itype not in types):
                continue
            rows.append({"type": itype, "price": price, "published": item.get("publicationDate", "")})
    if items and not rows:
        raise ShapeError(f"{what} answered {items} items, none with an hourly USD on-demand price")
    return rows


def read_spot(clients, region: str, types: list[str], now: dt.datetime | None = None) -> Unit:
    """The latest Linux/UNIX spot price of every zone for these types."""
    return read_unit("aws", "spot", region, "ec2:DescribeSpotPriceHistory", clients.deadline(),
                     lambda: _spot(clients, region, types, now or dt.datetime.now(dt.timezone.utc)))


def _spot(clients, region: str, types: list[str], now: dt.datetime) -> list[dict]:
    what = "ec2:DescribeSpotPriceHistory"
    latest: dict[tuple[str, str], dict] = {}
    ec2 = clients.client("ec2", region)
    for i in range(0, len(types), 100):
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=types[i:i + 100], ProductDescriptions=["Linux/UNIX"],
            StartTime=now - dt.timedelta(days=1), EndTime=now)
        for page in pages:
            for rec in need(page, "SpotPriceHistory", list, what):
                if not str(rec.get("ProductDescription", "")).startswith("Linux/UNIX"):
                    continue
                key = (need(rec, "InstanceType", str, what), need(rec, "AvailabilityZone", str, what))
                number(rec.get("SpotPrice"), f"{what} {key[0]} in {key[1]} SpotPrice")
                if not isinstance(rec.get("Timestamp"), dt.datetime):
                    raise ShapeError(f"{what} answered a record without a Timestamp")
                if key not in latest or rec["Timestamp"] > latest[key]["Timestamp"]:
                    latest[key] = rec
    rows = []
    for (itype, zone), rec in sorted(latest.items()):
        rows.append({"type": itype, "zone": zone, "price": float(rec["SpotPrice"]),
                     "date": rec["Timestamp"].date().isoformat()})
    return rows
