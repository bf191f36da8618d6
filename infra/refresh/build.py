"""Offers from what the readers fetched: the rows of $DLRUN_HOME/catalog/offers.csv (the schema of
configs/catalog/offers.csv, plus when and from where each price was fetched), AWS's per-zone spot prices
($DLRUN_HOME/spot_zones.csv, infra/spot_zones.py) and GCP's GPU zones ($DLRUN_HOME/catalog/gcp_gpu_zones.csv).

Every price carries its source and its fetch time; a region whose prices were never fetched has no rows
here (the shipped snapshot's rows stand for it, infra/catalog.py).
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

from infra.refresh.cache import Unit, stamp

FIELDS = ["cloud", "region", "instance_type", "accelerator", "accelerator_count", "gpu_memory_gb", "vcpus",
          "memory_gb", "price_per_hour", "spot_price_per_hour", "host_price_per_hour", "host_spot_price_per_hour",
          "gpu_price_per_hour", "gpu_spot_price_per_hour", "price_date", "source", "flags", "spot_price_date",
          "fetched_at", "spot_fetched_at", "spot_source", "gcp_accelerator_type"]
ZONE_FIELDS = ["cloud", "region", "instance_type", "zone", "spot_price_per_hour", "price_date", "source"]


def canonical_aws_gpu(name: str, mib: int) -> tuple[str, float]:
    """GpuInfo's name and memory -> dlrun's GPU name and per-GPU GB (A100 with 80 GiB is A100-80GB;
    a GPU gpus.csv does not know keeps AWS's name)."""
    from infra.catalog import gpu_spec

    gb = mib / 1024
    spec = gpu_spec(name)
    if spec is not None and gb and abs(spec.memory_gb - gb) / spec.memory_gb > 0.25:
        spec = gpu_spec(f"{name}-{round(gb)}GB") or gpu_spec(f"{name}-{round(gb / 8) * 8}GB")
        if spec is None:
            return f"{name}-{round(gb)}GB", round(gb)
    return (spec.name, spec.memory_gb) if spec else (name, round(gb))


def canonical_gcp_gpu(accelerator_type: str) -> tuple[str, float]:
    from infra.catalog import gpus

    for spec in gpus().values():
        if spec.gcp_accelerator_type == accelerator_type:
            return spec.name, spec.memory_gb
    name = accelerator_type.removeprefix("nvidia-").removeprefix("tesla-").upper()
    m = re.search(r"(\d+)GB", name)
    return name, float(m.group(1)) if m else 0.0


def _r(x: float | None) -> str:
    return "" if x is None else f"{x:.5f}".rstrip("0").rstrip(".")


def aws_rows(specs: dict[str, Unit], offerings: dict[str, Unit], ondemand: dict[str, Unit],
             spot: dict[str, Unit]) -> tuple[list[dict], list[dict]]:
    from infra.spot_zones import ZonePrice, rank

    rows, zone_rows = [], []
    for region, su in sorted(specs.items()):
        od = ondemand.get(region)
        if not su.fetched_at or od is None or not od.fetched_at:
            continue
        prices = {r["type"]: r["price"] for r in od.rows}
        off = offerings.get(region)
        sold = {r["type"]: r["zones"] for r in off.rows} if off and off.fetched_at else None
        sp = spot.get(region)
        zones: dict[str, list[dict]] = {}
        sp_at, sp_source = (sp.fetched_at, sp.source) if sp and sp.fetched_at else (0.0, "")
        if sp and sp.fetched_at:
            for r in sp.rows:
                zones.setdefault(r["type"], []).append(r)
        for t in su.rows:
            itype = t["type"]
            if itype not in prices or (sold is not None and not sold.get(itype)):
                continue
            accel, count, mem = "", 0, 0.0
            if t.get("gpu"):
                accel, mem = canonical_aws_gpu(t["gpu"], t.get("gpu_mib", 0))
                count = t["gpu_count"]
            spot_price, spot_flag = None, ""
            if zones.get(itype):
                ranking = rank([ZonePrice(z["zone"], z["price"], z["date"]) for z in zones[itype]])
                spot_price = ranking.launch_zone.price
                zone_rows += [{"cloud": "aws", "region": region, "instance_type": itype, "zone": z["zone"],
                               "spot_price_per_hour": z["price"], "price_date": stamp(sp_at)[:10],
                               "source": f"ec2:DescribeSpotPriceHistory (record of {z['date']})"}
                              for z in zones[itype]]
            rows.append({"cloud": "aws", "region": region, "instance_type": itype, "accelerator": accel,
                         "accelerator_count": count, "gpu_memory_gb": f"{mem:g}", "vcpus": t["vcpus"],
                         "memory_gb": f"{t['memory_gb']:g}", "price_per_hour": _r(prices[itype]),
                         "spot_price_per_hour": _r(spot_price), "price_date": stamp(od.fetched_at)[:10],
                         "source": f"aws {od.source} fetched {stamp(od.fetched_at)}", "flags": spot_flag,
                         "spot_price_date": stamp(sp_at)[:10] if spot_price is not None else "",
                         "fetched_at": f"{od.fetched_at:.0f}",
                         "spot_fetched_at": f"{sp_at:.0f}" if spot_price is not None else "",
                         "spot_source": f"aws {sp_source}" if spot_price is not None else ""})
    return rows, zone_rows


def gcp_rows(skus: Unit | None, machine_types: Unit | None, accelerators: Unit | None,
             regions: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """Offers per region: machine types priced from their series' core/RAM SKUs, built-in GPUs added per
    card, guest GPUs (types no machine type carries) on N1 hosts up to maximumCardsPerInstance."""
    if not (skus and skus.fetched_at and machine_types and machine_types.fetched_at):
        return [], []
    pricer = _GcpPricer(skus, machine_types, accelerators)
    for region in sorted(pricer.by_region):
        if not regions or region in regions:
            pricer.add_region(region)
    union: dict[tuple[str, str], set[str]] = {}
    for z in pricer.gpu_zone_rows:
        union.setdefault((z["accelerator"], z["region"]), set()).update(z["zones"].split())
    zone_rows = [{"accelerator": a, "region": r, "zones": " ".join(sorted(zs))} for (a, r), zs in sorted(union.items())]
    return pricer.rows, zone_rows


class _GcpPricer:
    """One fetch's SKU components (core, RAM, GPU per series/type, region, market) and where each machine type
    and accelerator is offered; add() prices one machine type (with its GPUs) into `rows`."""

    def __init__(self, skus: Unit, machine_types: Unit, accelerators: Unit | None):
        self.skus = skus
        self.comp: dict[tuple, float] = {}
        for r in skus.rows:  # two SKUs for one component in a region: the first listed wins (deterministic)
            self.comp.setdefault((r["part"], r["what"], r["spot"], r["region"]), r["price"])
        self.by_region: dict[str, dict[str, dict]] = {}
        self.zones_of: dict[tuple[str, str, str], set[str]] = {}  # (mt|gpu, name, region) -> zones
        for m in machine_types.rows:
            region = m["zone"].rsplit("-", 1)[0]
            self.by_region.setdefault(region, {})[m["name"]] = m
            self.zones_of.setdefault(("mt", m["name"], region), set()).add(m["zone"])
        built_in = {m["accelerator"] for m in machine_types.rows if m["accelerator"]}
        self.guest: dict[str, dict[str, int]] = {}
        if accelerators and accelerators.fetched_at:
            for a in accelerators.rows:
                region = a["zone"].rsplit("-", 1)[0]
                self.zones_of.setdefault(("gpu", a["name"], region), set()).add(a["zone"])
                if a["name"] not in built_in:
                    most = max(self.guest.get(region, {}).get(a["name"], 0), a["max_cards"])
                    self.guest.setdefault(region, {})[a["name"]] = most
        self.fetched = stamp(skus.fetched_at)
        self.rows: list[dict] = []
        self.gpu_zone_rows: list[dict] = []

    def add_region(self, region: str) -> None:
        """Every machine type of the region: with its built-in GPUs, CPU-only (N1 hosts only carry guest
        GPUs), and each guest GPU type on the N1 hosts that take that many cards."""
        from infra.refresh.gcp_prices import N1_HOSTS

        types = self.by_region[region]
        for m in types.values():
            if m["accelerator"]:
                self.add(region, m, m["accelerator"], m["count"])
            elif not m["name"].startswith("n1-"):
                self.add(region, m, "", 0)
        for accel_type, max_cards in sorted(self.guest.get(region, {}).items()):
            for count, hosts in N1_HOSTS.items():
                if count <= max_cards:
                    for h in hosts:
                        if h in types:
                            self.add(region, types[h], accel_type, count)

    def host(self, m: dict, region: str, spot: bool) -> float | None:
        series = m["name"].split("-", 1)[0].upper()
        core, ram = self.comp.get(("core", series, spot, region)), self.comp.get(("ram", series, spot, region))
        return None if core is None or ram is None else core * m["cpus"] + ram * m["memory_gb"]

    def gpu(self, accel_type: str, region: str, spot: bool) -> float | None:
        from infra.refresh.gcp_prices import gpu_key

        return self.comp.get(("gpu", " ".join(sorted(gpu_key(accel_type))), spot, region))

    def add(self, region: str, m: dict, accel_type: str, count: int) -> None:
        h, hs = self.host(m, region, False), self.host(m, region, True)
        if h is None:
            return
        name, mem, g, gs = "", 0.0, 0.0, 0.0
        if accel_type:
            per, per_spot = self.gpu(accel_type, region, False), self.gpu(accel_type, region, True)
            if per is None:
                return
            name, mem = canonical_gcp_gpu(accel_type)
            g, gs = per * count, (per_spot * count if per_spot is not None else None)
            zones = sorted(self.zones_of.get(("gpu", accel_type, region), set())
                           & self.zones_of[("mt", m["name"], region)])
            if not zones:
                return
            self.gpu_zone_rows.append({"accelerator": name, "region": region, "zones": " ".join(zones)})
        spot = None if hs is None or gs is None else hs + gs
        source, fetched, at = self.skus.source, self.fetched, f"{self.skus.fetched_at:.0f}"
        self.rows.append({
            "cloud": "gcp", "region": region, "instance_type": m["name"], "accelerator": name,
            "accelerator_count": count, "gpu_memory_gb": f"{mem:g}", "vcpus": m["cpus"],
            "memory_gb": f"{m['memory_gb']:g}", "price_per_hour": _r(h + g),
            "spot_price_per_hour": _r(spot),
            "host_price_per_hour": _r(h) if accel_type else "",
            "host_spot_price_per_hour": _r(hs) if accel_type else "",
            "gpu_price_per_hour": _r(g) if accel_type else "",
            "gpu_spot_price_per_hour": _r(gs) if accel_type else "",
            "price_date": fetched[:10], "source": f"gcp {source} fetched {fetched}", "flags": "",
            "spot_price_date": fetched[:10] if spot is not None else "", "fetched_at": at,
            "spot_fetched_at": at if spot is not None else "",
            "spot_source": f"gcp {source}" if spot is not None else "",
            "gcp_accelerator_type": accel_type})


def write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
