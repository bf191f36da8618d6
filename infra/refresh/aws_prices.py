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
import time

from infra.refresh.cache import Unit

CPU_TYPES = ("c7i.large", "c7i.xlarge", "m7i.large", "m7i.xlarge")
PRICE_FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}


def _failed(kind: str, region: str, e: BaseException, tried: float) -> Unit:
    code = getattr(e, "response", {}).get("Error", {}).get("Code", "") if hasattr(e, "response") else ""
    return Unit("aws", kind, region, error=f"{code or type(e).__name__}: {str(e)[:160]}", tried_at=tried)


def enabled_regions(clients, home: str = "us-east-1") -> list[str]:
    """The regions this account has enabled (describe_regions without AllRegions)."""
    regions = clients.client("ec2", home).describe_regions()["Regions"]
    return sorted(r["RegionName"] for r in regions
                  if r.get("OptInStatus", "opt-in-not-required") in ("opt-in-not-required", "opted-in"))


def read_specs(clients, region: str) -> Unit:
    tried = time.time()
    try:
        rows = []
        pages = clients.client("ec2", region).get_paginator("describe_instance_types").paginate(
            Filters=[{"Name": "instance-type", "Values": ["g*", "p*", *CPU_TYPES]},
                     {"Name": "processor-info.supported-architecture", "Values": ["x86_64"]}])
        for page in pages:
            for t in page["InstanceTypes"]:
                archs = t.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
                gpus = [g for g in (t.get("GpuInfo") or {}).get("Gpus", []) if g.get("Manufacturer") == "NVIDIA"]
                if any(g.get("GpuPartitionSize", 1.0) < 1.0 for g in gpus):
                    continue  # a fraction of a GPU (g6f): not a GPU dlrun can plan a job on
                if "x86_64" not in archs or not (gpus or t["InstanceType"] in CPU_TYPES):
                    continue
                row = {"type": t["InstanceType"], "vcpus": t["VCpuInfo"]["DefaultVCpus"],
                       "memory_gb": round(t["MemoryInfo"]["SizeInMiB"] / 1024, 2)}
                if gpus:
                    row.update(gpu=gpus[0]["Name"], gpu_count=sum(g.get("Count", 0) for g in gpus),
                               gpu_mib=gpus[0].get("MemoryInfo", {}).get("SizeInMiB", 0))
                rows.append(row)
    except Exception as e:  # noqa: BLE001 — a failed source keeps its previous rows
        return _failed("specs", region, e, tried)
    return Unit("aws", "specs", region, time.time(), "ec2:DescribeInstanceTypes", rows, tried_at=tried)


def read_offerings(clients, region: str, types: set[str]) -> Unit:
    tried = time.time()
    try:
        zones: dict[str, list[str]] = {}
        pages = clients.client("ec2", region).get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone")
        for page in pages:
            for o in page["InstanceTypeOfferings"]:
                if o["InstanceType"] in types:
                    zones.setdefault(o["InstanceType"], []).append(o["Location"])
    except Exception as e:  # noqa: BLE001
        return _failed("offerings", region, e, tried)
    rows = [{"type": t, "zones": sorted(z)} for t, z in sorted(zones.items())]
    return Unit("aws", "offerings", region, time.time(), "ec2:DescribeInstanceTypeOfferings", rows, tried_at=tried)


def _on_demand_price(item: dict) -> float | None:
    for term in item.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if dim.get("unit") == "Hrs" and "USD" in dim.get("pricePerUnit", {}):
                return float(dim["pricePerUnit"]["USD"])
    return None


def read_ondemand(clients, region: str, types: set[str] | None = None) -> Unit:
    """On-demand Linux prices of the region (every type, or `types`) from the Price List Query API."""
    tried = time.time()
    try:
        pricing = clients.client("pricing", clients.pricing_region)
        filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v}
                   for f, v in {"regionCode": region, **PRICE_FILTERS}.items()]
        rows = []
        for page in pricing.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", FormatVersion="aws_v1", Filters=filters, PaginationConfig={"PageSize": 100}):
            for raw in page.get("PriceList", []):
                item = json.loads(raw) if isinstance(raw, str) else raw
                attrs = item.get("product", {}).get("attributes", {})
                itype = attrs.get("instanceType")
                price = _on_demand_price(item)
                if not itype or price is None or price <= 0 or (types is not None and itype not in types):
                    continue
                rows.append({"type": itype, "price": price, "published": item.get("publicationDate", "")})
    except Exception as e:  # noqa: BLE001
        return _failed("ondemand", region, e, tried)
    return Unit("aws", "ondemand", region, time.time(), "pricing:GetProducts", rows, tried_at=tried)


def read_spot(clients, region: str, types: list[str], now: dt.datetime | None = None) -> Unit:
    """The latest Linux/UNIX spot price of every zone for these types."""
    tried = time.time()
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        latest: dict[tuple[str, str], dict] = {}
        ec2 = clients.client("ec2", region)
        for i in range(0, len(types), 100):
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=types[i:i + 100], ProductDescriptions=["Linux/UNIX"],
                StartTime=now - dt.timedelta(days=1), EndTime=now)
            for page in pages:
                for rec in page.get("SpotPriceHistory", []):
                    if not rec.get("ProductDescription", "").startswith("Linux/UNIX"):
                        continue
                    key = (rec["InstanceType"], rec["AvailabilityZone"])
                    if key not in latest or rec["Timestamp"] > latest[key]["Timestamp"]:
                        latest[key] = rec
    except Exception as e:  # noqa: BLE001
        return _failed("spot", region, e, tried)
    rows = []
    for (itype, zone), rec in sorted(latest.items()):
        ts = rec["Timestamp"]
        rows.append({"type": itype, "zone": zone, "price": float(rec["SpotPrice"]),
                     "date": ts.date().isoformat() if hasattr(ts, "date") else str(ts)[:10]})
    return Unit("aws", "spot", region, time.time(), "ec2:DescribeSpotPriceHistory", rows, tried_at=tried)
