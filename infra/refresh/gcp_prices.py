"""GCP prices and offers from Google's own APIs:

    ondemand  Cloud Billing Catalog API, GET /v1/services/6F81-5844-456A/skus (Compute Engine; pageSize 5000,
              pageToken): the per-vCPU and per-GiB prices of each machine series and the per-card price
              of each GPU, OnDemand and Preemptible (= Spot) usage types, per region (serviceRegions);
              price = units + nanos / 1e9 of the last tier, in USD per usageUnit h (a core, a GPU) or
              GiBy.h (RAM); a SKU in other units is not read (cloud.google.com/billing/docs/reference/
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

from infra.refresh.answers import ShapeError, need, number
from infra.refresh.bounds import current_or_new, read_unit
from infra.refresh.cache import Unit

COMPUTE_SERVICE = "6F81-5844-456A"
MACHINE_FILTER = ('name eq "(n1-standard-(4|8|16|32|64|96)|a2-(high|mega|ultra)gpu-.*|a3-highgpu-.*|'
                  'g2-standard-(4|8|12|16|24|32|48|96)|e2-standard-(2|4)|n2-standard-(2|4)|c3-standard-4)"')
# guest GPUs on N1: the host per card count (the snapshot's pairs; GPU counts 1/2/4/8 as GCE allows)
N1_HOSTS = {1: ("n1-standard-4", "n1-standard-8"), 2: ("n1-standard-8",), 4: ("n1-standard-32",),
            8: ("n1-standard-96",)}
_SERIES_SKU = re.compile(r"^(?:Spot Preemptible )?(N1 Predefined|[A-Z]\d[A-Z]?) Instance (Core|Ram) running in ")
_GPU_SKU = re.compile(r"^(?:Nvidia )?(.+?) GPU(?: attached to Spot Preemptible VMs)? running in ")


def _price(sku: dict, usage_unit: str) -> float | None:
    """The USD price of the last tier, None where the SKU is not priced in USD per `usage_unit` (h, GiBy.h)."""
    try:
        expression = sku["pricingInfo"][0]["pricingExpression"]
        unit = expression["tieredRates"][-1]["unitPrice"]
        if expression.get("usageUnit") != usage_unit or unit.get("currencyCode", "USD") != "USD":
            return None
        return int(unit.get("units") or 0) + int(unit.get("nanos") or 0) / 1e9
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None


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
        if cat.get("resourceGroup") == "GPU":
            m = _GPU_SKU.match(desc)
            part, what = ("gpu", " ".join(sorted(gpu_key(m.group(1))))) if m else (None, None)
        else:
            m = _SERIES_SKU.match(desc)
            part, what = (m.group(2).lower(), m.group(1).split()[0]) if m else (None, None)
        price = _price(sku, "GiBy.h" if part == "ram" else "h") if part else None
        if price is None:
            continue
        for region in sku.get("serviceRegions", []):
            rows.append({"part": part, "what": what, "spot": usage == "Preemptible", "region": region,
                         "price": price})
    return rows


def read_skus(clients) -> Unit:
    return read_unit("gcp", "ondemand", "global", "cloudbilling:services.skus.list", clients.deadline(),
                     lambda: _skus(clients))


def _skus(clients) -> list[dict]:
    what, deadline = "cloudbilling:services.skus.list", current_or_new(clients)
    skus, token, seen = [], "", set()
    while True:
        params = {"currencyCode": "USD", "pageSize": 5000, **({"pageToken": token} if token else {})}
        page = clients.billing_get(f"v1/services/{COMPUTE_SERVICE}/skus", params, deadline)
        got = need(page, "skus", list, what)
        if not all(isinstance(x, dict) for x in got):
            raise ShapeError(f"{what} answered a SKU that is not an object")
        skus += got
        token = page.get("nextPageToken") or ""
        if not isinstance(token, str):
            raise ShapeError(f"{what} answered a nextPageToken that is not a string")
        if not token:
            break
        if token in seen:
            raise ShapeError(f"{what} answered the page token {token[:40]!r} a second time (the listing would "
                             "never end)")
        seen.add(token)
    rows = parse_skus(skus)
    if not any(r["part"] in ("core", "ram") for r in rows):
        raise ShapeError(f"{what} answered {len(skus)} SKUs, none a VM's per-vCPU or per-GiB price in USD")
    return rows


def _zone_region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def read_machine_types(clients) -> Unit:
    return read_unit("gcp", "specs", "global", "compute.machineTypes.aggregatedList", clients.deadline(),
                     lambda: _machine_types(clients))


def _machine_types(clients) -> list[dict]:
    rows = []
    for page in clients.pages("MachineTypesClient", "aggregated_list",
                              {"project": clients.project, "filter": MACHINE_FILTER, "max_results": 500},
                              "compute#machineTypeAggregatedList", current_or_new(clients)):
        for scope, listing in page.items.items():
            for mt in listing.machine_types:
                what = f"compute.machineTypes.aggregatedList {scope} {mt.name or '(no name)'}"
                if not mt.name:
                    raise ShapeError(f"{what}: a machine type without a name")
                accel = mt.accelerators[0] if mt.accelerators else None
                rows.append({"zone": scope.removeprefix("zones/"), "name": mt.name,
                             "cpus": int(number(mt.guest_cpus, f"{what} guestCpus")),
                             "memory_gb": round(number(mt.memory_mb, f"{what} memoryMb") / 1024, 2),
                             "accelerator": accel.guest_accelerator_type if accel else "",
                             "count": accel.guest_accelerator_count if accel else 0})
    return rows


def read_accelerators(clients) -> Unit:
    return read_unit("gcp", "offerings", "global", "compute.acceleratorTypes.aggregatedList", clients.deadline(),
                     lambda: _accelerators(clients))


def _accelerators(clients) -> list[dict]:
    rows = []
    for page in clients.pages("AcceleratorTypesClient", "aggregated_list",
                              {"project": clients.project, "max_results": 500},
                              "compute#acceleratorTypeAggregatedList", current_or_new(clients)):
        for scope, listing in page.items.items():
            for at in listing.accelerator_types:
                what = f"compute.acceleratorTypes.aggregatedList {scope} {at.name or '(no name)'}"
                if not at.name:
                    raise ShapeError(f"{what}: an accelerator type without a name")
                rows.append({"zone": scope.removeprefix("zones/"), "name": at.name,
                             "max_cards": int(number(at.maximum_cards_per_instance, f"{what} maximumCardsPerInstance")),
                             "description": at.description})
    return rows


def read_zones(clients) -> Unit:
    return read_unit("gcp", "specs", "zones", "compute.regions.list", clients.deadline(),
                     lambda: [{"region": r.name, "zones": sorted(z.rsplit("/", 1)[-1] for z in r.zones)}
                              for r in list_regions(clients)])


def list_regions(clients) -> list:
    """regions.list: every region of the project (there is always one), each with a name and its zones."""
    regions = [r for page in clients.pages("RegionsClient", "list", {"project": clients.project},
                                           "compute#regionList", current_or_new(clients)) for r in page.items]
    if not regions:
        raise ShapeError("compute.regions.list answered no region")
    for r in regions:
        if not r.name or not r.zones:
            raise ShapeError(f"compute.regions.list answered a region without a name or zones ({r.name!r})")
    return regions
