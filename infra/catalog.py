"""Offer and GpuSpec records, loaded from configs/catalog/*.csv (stdlib only: fast to import)."""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from configs import CATALOG_DIR
from infra.paths import spot_prices_path


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU (configs/catalog/gpus.csv): dense peaks, no sparsity.

    Tensor-core peaks are with fp32 accumulation, as PyTorch runs them (GeForce cards run that at half
    their fp16-accumulate rate). A peak left empty means the GPU has no such math path."""

    name: str
    architecture: str
    memory_gb: float
    memory_bandwidth_gbps: float
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    sm_count: int
    boost_clock_mhz: int
    host_link_gbps: float
    gcp_accelerator_type: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def has_tf32(self) -> bool:
        """Ampere and later: cuDNN runs fp32 convolutions and RNNs as TF32 by PyTorch's default."""
        return self.tf32_tflops is not None

    def peak_tflops(self, math: str) -> float:
        """Peak dense TFLOPS of a math mode (fp32, tf32, fp16, bf16); the fp32 peak where the GPU lacks it."""
        peak = {"tf32": self.tf32_tflops, "fp16": self.fp16_tflops, "bf16": self.bf16_tflops}.get(math)
        return peak or self.fp32_tflops


@dataclass(frozen=True)
class Offer:
    """One way to rent compute: a cloud instance type in a region, or this machine (cloud='local')."""

    cloud: str
    region: str
    instance_type: str
    accelerator: str | None  # None: CPU only
    accelerator_count: int
    gpu_memory_gb: float
    vcpus: int
    memory_gb: float
    price_per_hour: float
    spot_price_per_hour: float | None
    price_date: str = ""
    source: str = ""
    host_price_per_hour: float | None = None
    gpu_price_per_hour: float | None = None
    host_spot_price_per_hour: float | None = None
    gpu_spot_price_per_hour: float | None = None
    spot_price_date: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """Stable identity of the offer (without the market): used for blocking and history."""
        return f"{self.cloud}/{self.region}/{self.instance_type}"

    def hourly(self, spot: bool) -> float:
        if spot:
            if self.spot_price_per_hour is None:
                raise ValueError(f"{self.key} has no spot price")
            return self.spot_price_per_hour
        return self.price_per_hour

    @property
    def label(self) -> str:
        """The offer as a person names it: `local CPU`, `aws us-east-1 g4dn.xlarge T4`."""
        return backend_name(self.cloud, self.region, self.instance_type, self.accelerator, self.accelerator_count)


def backend_name(cloud: str, region: str | None, instance_type: str | None, accelerator: str | None,
                 count: int | None = 1, spot: bool = False) -> str:
    """`local CPU`, `local 2×A100`, `aws us-east-1 g4dn.xlarge T4 spot`, `gcp us-central1 n2-standard-4 CPU`."""
    gpu = accelerator if accelerator and accelerator != "CPU" else "CPU"
    if gpu != "CPU" and (count or 1) > 1:
        gpu = f"{count}×{gpu}"
    if cloud == "local":
        return f"local {gpu}"
    return " ".join(p for p in (cloud, region, instance_type, gpu, "spot" if spot else "") if p)


def _f(v: str) -> float | None:
    return float(v) if v not in ("", None) else None


def _dir(catalog_dir: Path | None) -> Path:
    return Path(catalog_dir or os.environ.get("DLRUN_CATALOG_DIR") or CATALOG_DIR)


@lru_cache(maxsize=8)
def _load_gpus(catalog_dir: Path) -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    with open(catalog_dir / "gpus.csv", newline="") as f:
        for r in csv.DictReader(f):
            aliases = tuple(a for a in r["aliases"].split(";") if a)
            spec = GpuSpec(
                name=r["accelerator"], architecture=r["architecture"],
                memory_gb=float(r["memory_gb"]), memory_bandwidth_gbps=float(r["memory_bandwidth_gbps"]),
                fp32_tflops=float(r["fp32_tflops"]), tf32_tflops=_f(r["tf32_tensor_tflops"]),
                fp16_tflops=_f(r["fp16_tensor_tflops"]), bf16_tflops=_f(r["bf16_tensor_tflops"]),
                sm_count=int(r["sm_count"]), boost_clock_mhz=int(r["boost_clock_mhz"]),
                host_link_gbps=float(r["host_link_gbps"]), gcp_accelerator_type=r["gcp_accelerator_type"],
                aliases=aliases,
            )
            for n in (spec.name, *aliases):
                out[n.upper()] = spec
    return out


def gpus(catalog_dir: Path | None = None) -> dict[str, GpuSpec]:
    """GPU specs by upper-case name and alias."""
    return _load_gpus(_dir(catalog_dir))


def gpu_spec(name: str, catalog_dir: Path | None = None) -> GpuSpec | None:
    return gpus(catalog_dir).get(name.upper())


def gpu_names(catalog_dir: Path | None = None) -> list[str]:
    """Canonical names (no aliases), in catalog order."""
    seen: list[str] = []
    for s in gpus(catalog_dir).values():
        if s.name not in seen:
            seen.append(s.name)
    return seen


def canonical_gpu(name: str, catalog_dir: Path | None = None) -> str | None:
    spec = gpu_spec(name, catalog_dir)
    return spec.name if spec else None


def _row_to_offer(r: dict) -> Offer:
    extra = {}
    if r.get("fetched_at"):  # a refreshed row (infra/refresh/build.py): when and from where
        extra = {"fetched_at": float(r["fetched_at"]),
                 "spot_fetched_at": float(r["spot_fetched_at"]) if r.get("spot_fetched_at") else None,
                 "spot_source": r.get("spot_source", "")}
    if r.get("gcp_accelerator_type"):
        extra["gcp_accelerator_type"] = r["gcp_accelerator_type"]
    return Offer(
        cloud=r["cloud"], region=r["region"], instance_type=r["instance_type"],
        accelerator=r["accelerator"] or None, accelerator_count=int(r["accelerator_count"] or 0),
        gpu_memory_gb=float(r["gpu_memory_gb"] or 0), vcpus=int(r["vcpus"]), memory_gb=float(r["memory_gb"]),
        price_per_hour=float(r["price_per_hour"]), spot_price_per_hour=_f(r["spot_price_per_hour"]),
        price_date=r.get("price_date", ""), source=r.get("source", ""),
        host_price_per_hour=_f(r.get("host_price_per_hour", "")),
        gpu_price_per_hour=_f(r.get("gpu_price_per_hour", "")),
        host_spot_price_per_hour=_f(r.get("host_spot_price_per_hour", "")),
        gpu_spot_price_per_hour=_f(r.get("gpu_spot_price_per_hour", "")),
        spot_price_date=r.get("spot_price_date") or r.get("price_date", ""),
        extra=extra,
    )


def refreshed_offers_path() -> Path:
    from infra.paths import refresh_dir

    return refresh_dir() / "offers.csv"


def load_offers(path: Path | None = None, spot_overrides: Path | None = None,
                refreshed: Path | None = None) -> list[Offer]:
    """Every cloud offer: what `dlrun catalog refresh` fetched ($DLRUN_HOME/catalog/offers.csv) for the
    regions it fetched, the shipped snapshot for the others (with older refreshed spot prices applied)."""
    path = Path(path) if path else _dir(None) / "offers.csv"
    with open(path, newline="") as f:
        offers = [_row_to_offer(r) for r in csv.DictReader(f)]
    refreshed = refreshed if refreshed is not None else refreshed_offers_path()
    fetched: list[Offer] = []
    if refreshed.exists():
        with open(refreshed, newline="") as f:
            fetched = [_row_to_offer(r) for r in csv.DictReader(f)]
        covered = {(o.cloud, o.region) for o in fetched}
        offers = [o for o in offers if (o.cloud, o.region) not in covered]
    if spot_overrides is None:
        spot_overrides = spot_prices_path()
    if spot_overrides.exists():
        with open(spot_overrides, newline="") as f:
            fresh = {(r["cloud"], r["region"], r["instance_type"]): r for r in csv.DictReader(f)}
        offers = [
            replace(o, spot_price_per_hour=float(fresh[k]["spot_price_per_hour"]),
                    spot_price_date=fresh[k]["price_date"])
            if (k := (o.cloud, o.region, o.instance_type)) in fresh else o
            for o in offers
        ]
    return _priced_by_zone(offers + fetched)


def sold_markets(offer: Offer, catalog_dir: Path | None = None) -> tuple[str, ...] | None:
    """The markets ("on-demand", "spot") a cloud sells this instance type in, when not both: the cloud's
    `<cloud>_markets.csv` in the catalog (e.g. GCP's a3-highgpu-1g/2g/4g: spot only), with its source there.
    None: both, or the cloud has no such table."""
    return _markets_table(_dir(catalog_dir) / f"{offer.cloud}_markets.csv").get(offer.instance_type)


@lru_cache(maxsize=8)
def _markets_table(path: Path) -> dict[str, tuple[str, ...]]:
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {r["instance_type"]: tuple(r["markets"].split()) for r in csv.DictReader(f)}


def _priced_by_zone(offers: list[Offer]) -> list[Offer]:
    """Where per-zone spot prices are known, the spot price is the launch zone's (see spot_zones)."""
    from infra.spot_zones import rank, zone_prices

    by_zone = zone_prices()
    out = []
    for o in offers:
        prices = by_zone.get((o.cloud, o.region, o.instance_type))
        if not prices or o.spot_price_per_hour is None:
            out.append(o)
            continue
        ranking = rank(prices)
        lz = ranking.launch_zone
        out.append(replace(o, spot_price_per_hour=lz.price, spot_price_date=lz.date or o.spot_price_date,
                           extra={**o.extra, "spot_zones": ranking}))
    return out
