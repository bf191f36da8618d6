"""`dlrun catalog refresh` and the plan's reads of the clouds' APIs: quotas (quota_book) and prices,
offers and GPU types (refresh_catalog; infra/refresh/ has the readers, build.py the offers).

Quotas: the regions a plan's offers are in are read again where the cache is older than the lifetime
the caller gives (a plan: an hour; a launch: LAUNCH_QUOTA_AGE_S), all regions in parallel threads.

Prices: every source (per cloud, kind and region) is fetched when older than its lifetime, or always
(`dlrun catalog refresh`); $DLRUN_HOME/catalog/offers.csv, spot_zones.csv and gcp_gpu_zones.csv are then
rebuilt from the cache, and catalog.load_offers applies them over the shipped snapshot per region.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from infra.refresh import cache
from infra.refresh.clients import (AwsClients, GcpClients, aws_credentials_configured,
                                   gcp_credentials_configured)
from infra.refresh.quotas import QuotaBook
from infra.refresh.sources import SOURCES
from infra.spot_zones import home_zone_prices_path

WORKERS = 16
# the clouds whose APIs dlrun reads prices and quotas from, with the kinds of price source each has
KINDS = {cloud: source.kinds for cloud, source in SOURCES.items()}


# ---- quotas -----------------------------------------------------------------------------------------

def quota_book(regions: dict[str, set[str]], *, max_age_s: float | None = None,
               clients: dict[str, Any] | None = None, progress=None, fetch: bool = True) -> QuotaBook:
    """The quotas of these (cloud -> regions), read again where older than max_age_s (default: the kind's
    lifetime), in parallel; `clients` (cloud -> its clients) replaces the default ones. A cloud without
    credentials is "not checked", with the reason."""
    book = QuotaBook()
    jobs: list[tuple[str, list[str]]] = []
    for cloud, wanted in regions.items():
        if cloud not in SOURCES or not wanted:
            continue
        stale = _stale_quotas(book, cloud, wanted, max_age_s)
        if not stale or not fetch:
            continue
        why_not = SOURCES[cloud].credentials()
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
    given = clients or {}
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for cloud, stale in jobs:
            source = SOURCES[cloud]
            made = given.get(cloud) or source.clients()
            futures += [(cloud, pool.submit(read)) for read in source.quota_reads(made, stale)]
        results: dict[str, dict[str, cache.Unit]] = {}
        for cloud, f in futures:
            results.setdefault(cloud, {}).update(f.result())
    for cloud, fresh in results.items():
        merged = cache.save(cloud, "quotas", fresh)
        for region in fresh:
            book.units[(cloud, region)] = merged[region]
    return book


def _stale_quotas(book: QuotaBook, cloud: str, wanted: set[str], max_age_s: float | None) -> list[str]:
    """The quota units of a cloud to read again; the cached ones (stale or not) go into the book."""
    units = cache.load(cloud, "quotas")
    need = set(wanted) | SOURCES[cloud].quota_units
    for r in need:
        if r in units:
            book.units[(cloud, r)] = units[r]
    launch = max_age_s is not None and max_age_s <= cache.LAUNCH_QUOTA_AGE_S
    return sorted(r for r in need if r not in units or not (
        units[r].fresh(max_age_s) or (not launch and units[r].failed_recently())))


# ---- the whole catalog --------------------------------------------------------------------------------

def stale_refreshed(clouds) -> tuple[tuple[str, ...], list[str]]:
    """Of these clouds, those refreshed before (a cached price list) with a source past its lifetime, and the
    regions of per-region price sources (AWS) refreshed before (a plan's refresh reads those again, no others)."""
    stale, regions = [], set()
    for cloud in clouds:
        if cloud not in KINDS or not cache.path(cloud, "ondemand").exists():
            continue
        for kind in KINDS[cloud]:
            units = cache.load(cloud, kind)
            if SOURCES[cloud].regional_prices:
                regions |= set(units)
            if any(not u.fresh() for u in units.values()):
                stale.append(cloud)
    return tuple(dict.fromkeys(stale)), sorted(regions)


@dataclass
class SourceResult:
    cloud: str
    kind: str
    region: str
    status: str          # fetched | kept (failed: previous rows kept) | failed (nothing to keep) | fresh
    rows: int = 0
    age_s: float = 0.0
    error: str = ""

    def line(self) -> str:
        what = f"{self.cloud} {self.kind}{'' if self.region in ('global', '') else ' ' + self.region}"
        if self.status == "fetched":
            return f"{what}: {self.rows} rows fetched"
        if self.status == "fresh":
            return f"{what}: fresh ({cache.age_words(self.age_s)} old), not fetched"
        if self.status == "kept":
            return f"{what}: FAILED ({self.error}); kept the rows fetched {cache.age_words(self.age_s)} ago"
        return f"{what}: FAILED ({self.error}); nothing fetched before: the snapshot stands"


@dataclass
class RefreshReport:
    results: list[SourceResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)   # cloud -> why it was not refreshed
    offers: int = 0
    regions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> list[SourceResult]:
        return [r for r in self.results if r.status in ("kept", "failed")]


def _record(report: RefreshReport, lock, cloud: str, kind: str, fresh: dict[str, cache.Unit]) -> None:
    merged = cache.save(cloud, kind, fresh)
    with lock:
        for region, unit in fresh.items():
            m = merged[region]
            if not unit.error:
                report.results.append(SourceResult(cloud, kind, region, "fetched", len(unit.rows)))
            else:
                report.results.append(SourceResult(cloud, kind, region, "kept" if m.fetched_at else "failed",
                                                   len(m.rows), m.age_s(), unit.error))


def refresh_catalog(clouds=tuple(KINDS), regions: list[str] | None = None, *, max_age: dict | None = None,
                    aws=None, gcp=None, progress=None) -> RefreshReport:
    """Fetch what is older than its lifetime (max_age: kind -> seconds; {} forces everything) from the
    clouds' APIs, every source in parallel; then rebuild $DLRUN_HOME/catalog/offers.csv and the zone tables.
    A source that fails keeps its previous rows and says so; a cloud without credentials is skipped."""
    import threading

    from infra.refresh import aws_prices, gcp_prices

    started = time.time()
    report, lock = RefreshReport(), threading.Lock()
    ages = {k: cache.LIFETIME_S[k] if max_age is None else max_age.get(k, 0.0) for k in cache.LIFETIME_S}

    def stale(cloud, kind, region, units=None):
        u = (units or cache.load(cloud, kind)).get(region)
        if u is not None and u.fetched_at and u.fresh(ages[kind]):
            report.results.append(SourceResult(cloud, kind, region, "fresh", len(u.rows), u.age_s()))
            return False
        if u is not None and max_age is None and u.failed_recently():  # a plan: not again every time
            tried = cache.age_words(time.time() - u.tried_at)
            report.results.append(SourceResult(cloud, kind, region, "kept" if u.fetched_at else "failed",
                                               len(u.rows), u.age_s(), f"{u.error}, {tried} ago"))
            return False
        return True

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = []
        if "aws" in clouds:
            why = aws_credentials_configured()
            if why:
                report.skipped["aws"] = why
            else:
                aws = aws or AwsClients()
                try:
                    aws_regions = regions_for_aws(aws, regions)
                except Exception as e:  # noqa: BLE001 — describe_regions refused: nothing to refresh
                    report.skipped["aws"] = f"describe_regions failed: {type(e).__name__}: {str(e)[:120]}"
                    aws_regions = []
                if progress and aws_regions:
                    progress(f"refreshing aws: {len(aws_regions)} regions (prices, spot, offerings, specs)")
                cached = {k: cache.load("aws", k) for k in KINDS["aws"]}

                def aws_region(region):
                    spec = cached["specs"].get(region)
                    if stale("aws", "specs", region, cached["specs"]):
                        spec = aws_prices.read_specs(aws, region)
                        _record(report, lock, "aws", "specs", {region: spec})
                        if spec.error:
                            spec = cache.load("aws", "specs").get(region)
                    types = sorted({t["type"] for t in (spec.rows if spec else [])})
                    if not types:
                        return
                    if stale("aws", "offerings", region, cached["offerings"]):
                        _record(report, lock, "aws", "offerings",
                                {region: aws_prices.read_offerings(aws, region, set(types))})
                    if stale("aws", "spot", region, cached["spot"]):
                        _record(report, lock, "aws", "spot", {region: aws_prices.read_spot(aws, region, types)})

                for region in aws_regions:
                    futures.append(pool.submit(aws_region, region))
                    if stale("aws", "ondemand", region, cached["ondemand"]):
                        futures.append(pool.submit(lambda r=region: _record(
                            report, lock, "aws", "ondemand", {r: aws_prices.read_ondemand(aws, r)})))
        if "gcp" in clouds:
            why = gcp_credentials_configured()
            if why:
                report.skipped["gcp"] = why
            else:
                gcp = gcp or GcpClients()
                if progress:
                    progress("refreshing gcp: billing catalog SKUs, machine types, accelerator types, zones")
                for kind, region, reader in (("ondemand", "global", gcp_prices.read_skus),
                                             ("specs", "global", gcp_prices.read_machine_types),
                                             ("offerings", "global", gcp_prices.read_accelerators),
                                             ("specs", "zones", gcp_prices.read_zones)):
                    if stale("gcp", kind, region):
                        futures.append(pool.submit(lambda k=kind, r=region, f=reader: _record(
                            report, lock, "gcp", k, {r: f(gcp)})))
        for f in futures:
            f.result()
    rebuild_offers(report, regions)
    report.seconds = time.time() - started
    return report


def regions_for_aws(aws, regions: list[str] | None) -> list[str]:
    if regions:  # AWS names have a zone-less digit suffix (us-east-1); GCP's do not (us-central1)
        import re

        return [r for r in regions if re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", r)]
    from orchestrator.settings import env_str

    return aws_prices_enabled(aws, env_str("AWS_DEFAULT_REGION"))


def aws_prices_enabled(aws, home: str) -> list[str]:
    from infra.refresh.aws_prices import enabled_regions

    return enabled_regions(aws, home)


def rebuild_offers(report: RefreshReport | None = None, regions: list[str] | None = None) -> int:
    """$DLRUN_HOME/catalog/offers.csv, spot_zones.csv and gcp_gpu_zones.csv from the cache."""
    from infra.catalog import refreshed_offers_path
    from infra.paths import refresh_dir
    from infra.refresh import build

    aws_units = {k: cache.load("aws", k) for k in KINDS["aws"]}
    rows, zone_rows = build.aws_rows(aws_units["specs"], aws_units["offerings"], aws_units["ondemand"],
                                     aws_units["spot"])
    g = {k: cache.load("gcp", k) for k in KINDS["gcp"]}
    grows, gzones = build.gcp_rows(g["ondemand"].get("global"), g["specs"].get("global"),
                                   g["offerings"].get("global"))
    rows += grows
    if rows:
        build.write_csv(refreshed_offers_path(), build.FIELDS, rows)
    if zone_rows:
        build.write_csv(home_zone_prices_path(), build.ZONE_FIELDS, zone_rows)
    if gzones:
        build.write_csv(refresh_dir() / "gcp_gpu_zones.csv", ["accelerator", "region", "zones"], gzones)
    if report is not None:
        report.offers = len(rows)
        for r in rows:
            report.regions[r["cloud"]] = report.regions.get(r["cloud"], 0)
        report.regions = {c: len({r["region"] for r in rows if r["cloud"] == c}) for c in KINDS}
    return len(rows)
