"""One consistent pair of cloud accounts for the refresh tests and bench/catalog_refresh.py: what the
fakes serve (tests/support/billing_catalog_server.py, gce_catalog_server.py, aws_api_server.py, moto's EC2
with a seeded spot history) at realistic volumes: 40 GCP regions (one without any GPU, one with
A100-80GB that the shipped snapshot lacks), thousands of billing SKUs (most of them not VM prices),
every EC2 region moto knows with its instance types, and on-demand price items per region.

Prices are invented but shaped like the real ones (series core/RAM prices, per-card GPU prices, spot at
about 30-40 %); they are not facts about the clouds.
"""
from __future__ import annotations

import copy
import json

from tests.support.billing_catalog_server import BillingCatalog, sku
from tests.support.gce_catalog_server import GceCatalog

# accelerator type -> (SKU words, $/h per card, spot $/h, max cards, machine family that carries it or "")
GCP_GPUS = {
    "nvidia-tesla-t4": ("Nvidia Tesla T4", 0.35, 0.14, 4, ""),
    "nvidia-tesla-v100": ("Nvidia Tesla V100", 2.48, 0.99, 8, ""),
    "nvidia-tesla-p100": ("Nvidia Tesla P100", 1.46, 0.58, 4, ""),
    "nvidia-l4": ("Nvidia L4", 0.56, 0.22, 8, "g2"),
    "nvidia-tesla-a100": ("Nvidia Tesla A100", 2.93, 1.17, 16, "a2-highgpu"),
    "nvidia-a100-80gb": ("Nvidia Tesla A100 80GB", 3.93, 1.57, 8, "a2-ultragpu"),
    "nvidia-h100-80gb": ("Nvidia H100 80GB", 9.80, 3.92, 8, "a3-highgpu"),
}
SERIES = {"N1": ("N1 Predefined", 0.031611, 0.004237), "N2": ("N2", 0.031611, 0.004237),
          "E2": ("E2", 0.021811, 0.002923), "C3": ("C3", 0.03398, 0.00455), "A2": ("A2", 0.031611, 0.004237),
          "A3": ("A3", 0.0325, 0.00436), "G2": ("G2", 0.024, 0.0029)}
GCP_BASE = ["us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1", "us-west2", "us-west3",
            "us-west4", "northamerica-northeast1", "northamerica-northeast2", "southamerica-east1",
            "southamerica-west1", "europe-west1", "europe-west2", "europe-west3", "europe-west4", "europe-west6",
            "europe-west8", "europe-west9", "europe-west10", "europe-west12", "europe-north1", "europe-north2",
            "europe-central2", "europe-southwest1", "me-west1", "me-central1", "me-central2", "africa-south1",
            "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3", "asia-south1",
            "asia-south2", "asia-southeast1", "asia-southeast2", "australia-southeast1"]
NO_GPU_REGION = "europe-north2"


def machine_types(family: str, accel: str) -> list[tuple[str, int, int, tuple[str, int] | None]]:
    if family == "g2":
        return [(f"g2-standard-{c}", c, c * 4 * 1024, (accel, g)) for c, g in ((4, 1), (8, 1), (12, 1), (16, 1),
                                                                             (24, 2), (32, 1), (48, 4), (96, 8))]
    if family == "a2-highgpu":
        return [(f"a2-highgpu-{g}g", 12 * g, 85 * 1024 * g, (accel, g)) for g in (1, 2, 4, 8)]
    if family == "a2-ultragpu":
        return [(f"a2-ultragpu-{g}g", 12 * g, 170 * 1024 * g, (accel, g)) for g in (1, 2, 4, 8)]
    if family == "a3-highgpu":
        return [(f"a3-highgpu-{g}g", 26 * g, 234 * 1024 * g, (accel, g)) for g in (1, 2, 4, 8)]
    return []


BASIC_TYPES = [(f"n1-standard-{c}", c, int(c * 3.75 * 1024), None) for c in (1, 2, 4, 8, 16, 32, 64, 96)] + \
    [("e2-standard-2", 2, 8192, None), ("e2-standard-4", 4, 16384, None), ("n2-standard-2", 2, 8192, None),
     ("n2-standard-4", 4, 16384, None), ("c3-standard-4", 4, 16384, None)] + \
    [(f"{s}-{k}-{c}", c, c * 4096, None) for s in ("n2", "n2d", "m1", "c2", "t2d") for k in ("highmem", "highcpu")
     for c in (2, 4, 8, 16, 32)]  # not planned: the filter leaves them out


def gpus_of(i: int, region: str) -> list[str]:
    if region == NO_GPU_REGION:
        return []
    out = ["nvidia-tesla-t4", "nvidia-l4"]
    if i % 3 == 0:
        out += ["nvidia-tesla-v100", "nvidia-tesla-p100"]
    if i % 4 == 0 or region in ("us-central1", "us-east5"):
        out += ["nvidia-tesla-a100", "nvidia-a100-80gb"]
    if i % 5 == 0:
        out.append("nvidia-h100-80gb")
    return out


def gcp_world(n_regions: int = 40, gpus_all_regions: float = 64) -> tuple[GceCatalog, BillingCatalog]:
    gce, billing = GceCatalog(), BillingCatalog()
    regions = GCP_BASE[:n_regions]
    n = 0
    for i, region in enumerate(regions):
        factor = 1.0 if region.startswith("us-") else 1.1 + (i % 4) * 0.05
        gpus = gpus_of(i, region)
        quotas = {"CPUS": (96, 0), "N2_CPUS": (96, 0), "E2_CPUS": (96, 0), "C3_CPUS": (96, 0), "A2_CPUS": (96, 0)}
        for g in gpus:
            metric = g.removeprefix("nvidia-").removeprefix("tesla-").upper().replace("-", "_")
            if g != "nvidia-h100-80gb":  # regions.list has no H100 metric
                quotas[f"NVIDIA_{metric}_GPUS"] = (8, 0)
                quotas[f"PREEMPTIBLE_NVIDIA_{metric}_GPUS"] = (0, 0)
        gce.add_region(region, 3, **quotas)
        for z in gce.regions[region].zones:
            for name, cpus, mem, acc in BASIC_TYPES:
                gce.add_machine_type(z, name, cpus, mem, acc)
            for g in gpus:
                words, od, sp, max_cards, family = GCP_GPUS[g]
                gce.add_accelerator(z, g, max_cards)
                for name, cpus, mem, acc in machine_types(family, g):
                    gce.add_machine_type(z, name, cpus, mem, acc)
        for s, (words, core, ram) in SERIES.items():
            for part, price in (("Core", core), ("Ram", ram)):
                for usage, mult, prefix in (("OnDemand", 1.0, ""), ("Preemptible", 0.3, "Spot Preemptible ")):
                    n += 1
                    group = "N1Standard" if s == "N1" else ("CPU" if part == "Core" else "RAM")
                    billing.skus.append(sku(f"{n:04X}-{i:04X}-{s}{part}{usage[0]}", f"{prefix}{words} Instance {part} "
                                            f"running in {region}", group, usage, [region],
                                            price * factor * mult, "h" if part == "Core" else "GiBy.h",
                                            nanos_only=True))
        for g in gpus:
            words, od, sp, _, _ = GCP_GPUS[g]
            n += 2
            billing.skus.append(sku(f"{n:04X}-G{i:03X}-O", f"{words} GPU running in {region}", "GPU", "OnDemand",
                                    [region], od * factor))
            billing.skus.append(sku(f"{n:04X}-G{i:03X}-S", f"{words} GPU attached to Spot Preemptible VMs running "
                                    f"in {region}", "GPU", "Preemptible", [region], sp * factor))
        for k in range(110):  # what a VM price must not be built from
            n += 1
            kind = k % 5
            desc, group, usage, family = [
                (f"Commitment v1: N1 Cpu in {region} for 1 Year", "CPU", "Commit1Yr", "Compute"),
                (f"N1 Custom Instance Core running in {region}", "CPU", "OnDemand", "Compute"),
                (f"Sole Tenancy Instance Core running in {region}", "CPU", "OnDemand", "Compute"),
                (f"Network Internet Egress from {region} to Americas #{k}", "PremiumInternetEgress", "OnDemand",
                 "Network"),
                (f"Licensing Fee for Windows Server {k} on VM with 4 VCPU", "Windows", "OnDemand", "License")][kind]
            billing.skus.append(sku(f"{n:04X}-X{i:03X}", desc, group, usage, [region], 0.02 + k / 1000, "h", family))
    gce.project_quotas = {"GPUS_ALL_REGIONS": (gpus_all_regions, 0), "CPUS_ALL_REGIONS": (512, 0)}
    return gce, billing


# ---- AWS ------------------------------------------------------------------------------------------

AWS_GPU_PRICE = {"T4": 0.30, "A10G": 0.80, "V100": 2.40, "A100": 3.00, "H100": 7.00, "H200": 9.0, "L4": 0.60,
                 "L40S": 1.40, "K80": 0.90, "M60": 0.75, "B200": 12.0}


_AWS_TYPES: list[dict] = []  # moto's instance types, read once per session (its own static data: 4-6 s a read)


def aws_types(ec2) -> list[dict]:
    """The instance types moto's EC2 knows (its own data, from the real API), read through `ec2` the first time
    in the session and copied after (each test gets its own copy to change)."""
    if not _AWS_TYPES:
        _AWS_TYPES.extend(t for page in ec2.get_paginator("describe_instance_types").paginate()
                          for t in page["InstanceTypes"])
    return copy.deepcopy(_AWS_TYPES)


def aws_od_price(t: dict) -> float:
    gpus = (t.get("GpuInfo") or {}).get("Gpus", [])
    gpu = sum(AWS_GPU_PRICE.get(g["Name"], 1.0) * g.get("Count", 1) for g in gpus)
    return round(t["VCpuInfo"]["DefaultVCpus"] * 0.034 + t["MemoryInfo"]["SizeInMiB"] / 1024 * 0.0045 + gpu, 4)


def aws_price_items(types: list[dict], regions: list[str], others_per_region: int = 300) -> list[dict]:
    """Price List items (product + terms, the shape of awscli's get-products example) for every GPU type,
    the CPU types dlrun plans and `others_per_region` more, each with variants the filters must drop."""
    from infra.refresh.aws_prices import CPU_TYPES

    chosen = [t for t in types if t.get("GpuInfo") or t["InstanceType"] in CPU_TYPES]
    chosen += [t for t in types if not t.get("GpuInfo") and t["InstanceType"] not in CPU_TYPES][:others_per_region]
    items = []
    for region in regions:
        for t in chosen:
            for os_, tenancy, sw, cap in (("Linux", "Shared", "NA", "Used"), ("Windows", "Shared", "NA", "Used"),
                                          ("Linux", "Dedicated", "NA", "Used"),
                                          ("Linux", "Shared", "SQL Web", "Used"),
                                          ("Linux", "Shared", "NA", "UnusedCapacityReservation")):
                price = aws_od_price(t) * (1.0 if region.startswith("us-") else 1.12)
                price *= 1.0 if os_ == "Linux" and tenancy == "Shared" and sw == "NA" else 1.4
                sku_id = f"{region}-{t['InstanceType']}-{os_}-{tenancy}-{sw}-{cap}".replace(" ", "")
                gpus = (t.get("GpuInfo") or {}).get("Gpus", [])
                items.append({
                    "product": {"productFamily": "Compute Instance", "sku": sku_id, "attributes": {
                        "servicecode": "AmazonEC2", "regionCode": region, "instanceType": t["InstanceType"],
                        "vcpu": str(t["VCpuInfo"]["DefaultVCpus"]),
                        "memory": f"{t['MemoryInfo']['SizeInMiB'] / 1024:g} GiB",
                        "gpu": str(sum(g.get("Count", 1) for g in gpus)) if gpus else "0",
                        "operatingSystem": os_, "tenancy": tenancy, "preInstalledSw": sw, "capacitystatus": cap,
                        "licenseModel": "No License required", "operation": "RunInstances",
                        "usagetype": f"BoxUsage:{t['InstanceType']}"}},
                    "serviceCode": "AmazonEC2",
                    "terms": {"OnDemand": {f"{sku_id}.JRTCKXETXF": {
                        "offerTermCode": "JRTCKXETXF", "sku": sku_id, "effectiveDate": "2026-11-01T00:00:00Z",
                        "termAttributes": {}, "priceDimensions": {f"{sku_id}.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                            "description": f"${price:.4f} per On Demand {os_} {t['InstanceType']} Instance Hour",
                            "rateCode": f"{sku_id}.JRTCKXETXF.6YS6EN2CT7",
                            "pricePerUnit": {"USD": f"{price:.10f}"}}}}}},
                    "version": "20261101000000", "publicationDate": "2026-11-01T00:00:00Z"})
    return items


def spot_history(types: list[dict], regions: list[str], zones: dict[str, list[str]]) -> list[dict]:
    """describe_spot_price_history records: each zone's price (one zone of p4d far below the others, as
    in use1-az1), older records replaced by newer ones, and Windows records the filter must drop."""
    from infra.refresh.aws_prices import CPU_TYPES

    recs = []
    for region in regions:
        for t in types:
            if not (t.get("GpuInfo") or t["InstanceType"] in CPU_TYPES):
                continue
            base = aws_od_price(t) * 0.35
            for k, zone in enumerate(zones.get(region, [])):
                price = base * (1 + 0.03 * k) * (0.3 if t["InstanceType"] == "p4d.24xlarge" and k == 0 else 1)
                recs.append({"InstanceType": t["InstanceType"], "AvailabilityZone": zone, "SpotPrice": f"{price * 1.2:.4f}",
                             "ProductDescription": "Linux/UNIX", "Timestamp": "2026-11-25T01:00:00Z"})
                recs.append({"InstanceType": t["InstanceType"], "AvailabilityZone": zone, "SpotPrice": f"{price:.4f}",
                             "ProductDescription": "Linux/UNIX", "Timestamp": "2026-11-26T01:00:00Z"})
                recs.append({"InstanceType": t["InstanceType"], "AvailabilityZone": zone, "SpotPrice": "0.0010",
                             "ProductDescription": "Windows", "Timestamp": "2026-11-26T02:00:00Z"})
    return recs


def seed_spot_history(monkeypatch, records: list[dict]) -> None:
    """moto answers describe_spot_price_history with a constant; serve these records instead (by type
    and region, as EC2 does)."""
    from moto.core.responses import ActionResult
    from moto.ec2.responses.spot_instances import SpotInstances

    by_region: dict[str, list[dict]] = {}
    for r in records:
        by_region.setdefault(r["AvailabilityZone"][:-1], []).append(r)

    def seeded(self):
        types = set(self._get_param("InstanceTypes", []))
        return ActionResult({"SpotPriceHistory": [r for r in by_region.get(self.region, [])
                                                  if r["InstanceType"] in types]})

    monkeypatch.setattr(SpotInstances, "describe_spot_price_history", seeded)


def dumps(items: list[dict]) -> int:
    return sum(len(json.dumps(i)) for i in items)
