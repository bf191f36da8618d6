"""GCP prices and offers from Google's own APIs:

    ondemand  Cloud Billing Catalog API, GET /v1/services/6F81-5844-456A/skus (Compute Engine; pageSize 5000,
              pageToken): the per-vCPU and per-GiB prices of each machine series and the per-card price
              of each GPU, OnDemand and Preemptible (= Spot) usage types, per region (serviceRegions);
              price = units + nanos / 1e9 of the last tier (cloud.google.com/billing/docs/reference/
              rest/v1/services.skus/list). A VM = core x vCPUs + RAM x GiB (+ GPU x cards), the way
              SkyPilot's fetch_gcp.py and gpuhunt's gcp.py combine them.
    specs     machineTypes aggregatedList, filtered to the series dlrun plans (guestCpus, memoryMb,
              accelerators[] of the a2/a3/g2 families)
    offerings acceleratorTypes aggregatedList (maximumCardsPerInstance per zone) and regions.list (zones)

Spot VM prices change at most once every 30 days (cloud.google.com/skus), so GCP's spot prices are
read with the on-demand ones (kind "ondemand", a day's lifetime).
"""
from __future__ import annotations

import re
import time

from infra.refresh.cache import Unit

COMPUTE_SERVICE = "6F81-5844-456A"
MACHINE_FILTER = ('name eq "(n1-standard-(4|8|16|32|64|96)|a2-(high|mega|ultra)gpu-.*|a3-highgpu-.*|'
                  'g2-standard-(4|8|12|16|24|32|48|96)|e2-standard-(2|4)|n2-standard-(2|4)|c3-standard-4)"')
# guest GPUs on N1: the host per card count (the snapshot's pairs; GPU counts 1/2/4/8 as GCE allows)
N1_HOSTS = {1: ("n1-standard-4", "n1-standard-8"), 2: ("n1-standard-8",), 4: ("n1-standard-32",),
            8: ("n1-standard-96",)}
_SERIES_SKU = re.compile(r"^(?:Spot Preemptible )?(N1 Predefined|[A-Z]\d[A-Z]?) Instance (Core|Ram) running in ")
_GPU_SKU = re.compile(r"^(?:Nvidia )?(.+?) GPU(?: attached to Spot Preemptible VMs)? running in ")


def _price(sku: dict) -> float | None:
    try:
        rates = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"]
        unit = rates[-1]["unitPrice"]
    except (KeyError, IndexError):
        return None
    return int(unit.get("units") or 0) + int(unit.get("nanos") or 0) / 1e9


def gpu_key(words: str) -> frozenset[str]:
    """'Tesla A100 80GB' and 'nvidia-a100-80gb' -> {'A100', '80GB'}."""
    tokens = re.split(r"[\s\-]+", words.upper())
    return frozenset(t for t in tokens if t and t not in ("NVIDIA", "TESLA"))


def parse_skus(skus: list[dict]) -> list[dict]:
    """Component prices: {part: core|ram|gpu, what: series (N1) or GPU words, spot, region, price}."""
    rows = []
    for sku in skus:
        cat = sku.get("category", {})
        usage = cat.get("usageType")
        if cat.get("resourceFamily") != "Compute" or usage not in ("OnDemand", "Preemptible"):
            continue
        desc = sku.get("description", "")
        price = _price(sku)
        if price is None:
            continue
        if cat.get("resourceGroup") == "GPU":
            m = _GPU_SKU.match(desc)
            part, what = ("gpu", " ".join(sorted(gpu_key(m.group(1))))) if m else (None, None)
        else:
            m = _SERIES_SKU.match(desc)
            part, what = (m.group(2).lower(), m.group(1).split()[0]) if m else (None, None)
        if part is None:
            continue
        for region in sku.get("serviceRegions", []):
            rows.append({"part": part, "what": what, "spot": usage == "Preemptible", "region": region,
                         "price": price})
    return rows


def read_skus(clients) -> Unit:
    tried = time.time()
    try:
        skus, token = [], ""
        while True:
            params = {"currencyCode": "USD", "pageSize": 5000, **({"pageToken": token} if token else {})}
            page = clients.billing_get(f"v1/services/{COMPUTE_SERVICE}/skus", params)
            skus += page.get("skus", [])
            token = page.get("nextPageToken", "")
            if not token:
                break
    except Exception as e:  # noqa: BLE001 — a failed source keeps its previous rows
        return Unit("gcp", "ondemand", "global", error=f"{type(e).__name__}: {str(e)[:160]}", tried_at=tried)
    return Unit("gcp", "ondemand", "global", time.time(), "cloudbilling:services.skus.list", parse_skus(skus),
                tried_at=tried)


def _zone_region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def read_machine_types(clients) -> Unit:
    tried = time.time()
    try:
        rows = []
        pager = clients.compute("MachineTypesClient").aggregated_list(
            request={"project": clients.project, "filter": MACHINE_FILTER, "max_results": 500})
        for scope, listing in pager:
            for mt in listing.machine_types:
                accel = mt.accelerators[0] if mt.accelerators else None
                rows.append({"zone": scope.removeprefix("zones/"), "name": mt.name, "cpus": mt.guest_cpus,
                             "memory_gb": round(mt.memory_mb / 1024, 2),
                             "accelerator": accel.guest_accelerator_type if accel else "",
                             "count": accel.guest_accelerator_count if accel else 0})
    except Exception as e:  # noqa: BLE001
        return Unit("gcp", "specs", "global", error=f"{type(e).__name__}: {str(e)[:160]}", tried_at=tried)
    return Unit("gcp", "specs", "global", time.time(), "compute.machineTypes.aggregatedList", rows, tried_at=tried)


def read_accelerators(clients) -> Unit:
    tried = time.time()
    try:
        rows = []
        pager = clients.compute("AcceleratorTypesClient").aggregated_list(
            request={"project": clients.project, "max_results": 500})
        for scope, listing in pager:
            for at in listing.accelerator_types:
                rows.append({"zone": scope.removeprefix("zones/"), "name": at.name,
                             "max_cards": at.maximum_cards_per_instance, "description": at.description})
    except Exception as e:  # noqa: BLE001
        return Unit("gcp", "offerings", "global", error=f"{type(e).__name__}: {str(e)[:160]}", tried_at=tried)
    return Unit("gcp", "offerings", "global", time.time(), "compute.acceleratorTypes.aggregatedList", rows,
                tried_at=tried)


def read_zones(clients) -> Unit:
    tried = time.time()
    try:
        rows = [{"region": r.name, "zones": sorted(z.rsplit("/", 1)[-1] for z in r.zones)}
                for r in clients.compute("RegionsClient").list(project=clients.project)]
    except Exception as e:  # noqa: BLE001
        return Unit("gcp", "specs", "zones", error=f"{type(e).__name__}: {str(e)[:160]}", tried_at=tried)
    return Unit("gcp", "specs", "zones", time.time(), "compute.regions.list", rows, tried_at=tried)
