"""`dlrun catalog refresh` and the plan's reads of the clouds' APIs: quotas (quota_book) and prices,
offers and GPU types (refresh_catalog; infra/refresh/ has the readers, build.py the offers).

Quotas: the regions a plan's offers are in are read again where the cache is older than the lifetime
the caller gives (a plan: an hour; a launch: LAUNCH_QUOTA_AGE_S), all regions in parallel threads.

Prices: every source (per cloud, kind and region) is fetched when older than its lifetime, or always
(`dlrun catalog refresh`); $DLRUN_HOME/catalog/offers.csv, spot_zones.csv and gcp_gpu_zones.csv are then
rebuilt from the cache, and catalog.load_offers applies them over the shipped snapshot per region.

Every source has a deadline (infra/refresh/bounds.py): DLRUN_REFRESH_DEADLINE_S for `dlrun catalog refresh`
and `dlrun catalog quotas`, DLRUN_PLAN_REFRESH_DEADLINE_S for what a plan reads by itself (it then plans with
the cached rows and a note). RefreshReport.outcome says how a refresh went as a whole (the exit code).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from infra.refresh import cache
from infra.refresh.answers import is_refusal
from infra.refresh.quotas import QuotaBook
from infra.refresh.sources import SOURCES
from infra.spot_zones import home_zone_prices_path
from orchestrator.settings import env_float

COMMAND_DEADLINE = "DLRUN_REFRESH_DEADLINE_S"     # a source's deadline in `dlrun catalog refresh` / `quotas`
PLAN_DEADLINE = "DLRUN_PLAN_REFRESH_DEADLINE_S"   # ... in what a plan reads by itself


def make_clients(cloud: str, deadline: str):
    """The cloud's clients, every source they read bound by the deadline the setting `deadline` gives."""
    return SOURCES[cloud].clients(deadline_s=env_float(deadline), deadline_setting=deadline)

WORKERS = 16
# the clouds whose APIs dlrun reads prices and quotas from, with the kinds of price source each has
KINDS = {cloud: source.kinds for cloud, source in SOURCES.items()}


# ---- quotas -----------------------------------------------------------------------------------------

def quota_book(regions: dict[str, set[str]], *, max_age_s: float | None = None,
               clients: dict[str, Any] | None = None, progress=None, fetch: bool = True,
               deadline: str = PLAN_DEADLINE) -> QuotaBook:
    """The quotas of these (cloud -> regions), read again where older than max_age_s (default: the kind's
    lifetime), in parallel; `clients` (cloud -> its clients) replaces the default ones, each source bound by
    the setting `deadline` (a plan's by default). A cloud without credentials is "not checked", with the
    reason."""
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
            made = given.get(cloud) or make_clients(cloud, deadline)
            futures += [(cloud, pool.submit(read)) for read in source.quota_reads(made, stale)]
        results: dict[str, dict[str, cache.Unit]] = {}
        for cloud, f in futures:
            results.setdefault(cloud, {}).update(f.result())
    for cloud, fresh in results.items():
        merged = cache.save(cloud, "quotas", fresh)
        for region in fresh:
            book.units[(cloud, region)] = merged[region]
            book.read_now.add((cloud, region))
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
    kind: str            # a cache kind, or "regions" (AWS's list of the account's regions)
    region: str
    status: str          # fetched | kept (failed: previous rows kept) | failed (nothing to keep) | fresh
    rows: int = 0
    age_s: float = 0.0
    error: str = ""
    fetched_at: float = 0.0  # when the rows it has now were fetched (0: never)

    @property
    def ok(self) -> bool:
        return self.status in ("fetched", "fresh")

    def line(self) -> str:
        what = f"{self.cloud} {self.kind}{'' if self.region in ('global', '') else ' ' + self.region}"
        if self.status == "fetched":
            return f"{what}: {self.rows} rows fetched"
        if self.status == "fresh":
            return f"{what}: fresh ({cache.age_words(self.age_s)} old), not fetched"
        if self.kind == "regions":
            return f"{what}: FAILED ({self.error}); no region read again, each keeps the rows it had"
        if self.status == "kept":
            return (f"{what}: FAILED ({self.error}); kept the {self.rows} rows fetched "
                    f"{cache.age_words(self.age_s)} ago")
        return f"{what}: FAILED ({self.error}); nothing fetched before: the snapshot stands"


@dataclass
class RefreshReport:
    results: list[SourceResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)   # cloud -> why it was not refreshed (no credentials)
    offers: int = 0
    regions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> list[SourceResult]:
        return [r for r in self.results if r.status in ("kept", "failed")]

    @property
    def fetched(self) -> list[SourceResult]:
        return [r for r in self.results if r.status == "fetched"]

    @property
    def outcome(self) -> str:
        """ok (nothing failed) | partial (some sources failed, others were fetched) | refused (nothing
        fetched, and the clouds refused the credentials of every failed source) | nothing (nothing fetched)."""
        if not self.failed:
            return "ok"
        if self.fetched:
            return "partial"
        return "refused" if all(is_refusal(r.error) for r in self.failed) else "nothing"


Read = Callable[[], None]  # one call to a cloud's API, its result recorded


class _Refresh:
    """One refresh: which sources are due (past their lifetime, or all when forced) and what each gave."""

    def __init__(self, max_age: dict | None, deadline: str):
        self.report, self._lock = RefreshReport(), threading.Lock()
        self.deadline = deadline
        self._plan = max_age is None  # a plan's refresh: a source that failed lately is not tried every time
        self._ages = {k: cache.LIFETIME_S[k] if max_age is None else max_age.get(k, 0.0) for k in cache.LIFETIME_S}

    def due(self, cloud: str, kind: str, region: str, units: dict[str, cache.Unit] | None = None) -> bool:
        """Whether this source is fetched; one that is not says why in the report."""
        u = (units or cache.load(cloud, kind)).get(region)
        if u is not None and u.fetched_at and u.fresh(self._ages[kind]):
            self.report.results.append(SourceResult(cloud, kind, region, "fresh", len(u.rows), u.age_s(),
                                                    fetched_at=u.fetched_at))
            return False
        if u is not None and self._plan and u.failed_recently():
            tried = cache.age_words(time.time() - u.tried_at)
            self.report.results.append(SourceResult(cloud, kind, region, "kept" if u.fetched_at else "failed",
                                                    len(u.rows), u.age_s(), f"{u.error}, {tried} ago",
                                                    u.fetched_at))
            return False
        return True

    def record(self, cloud: str, kind: str, fresh: dict[str, cache.Unit]) -> None:
        """Cache what was read (a failed read keeps the previous rows) and report each source."""
        merged = cache.save(cloud, kind, fresh)
        with self._lock:
            for region, unit in fresh.items():
                m = merged[region]
                if not unit.error:
                    self.report.results.append(SourceResult(cloud, kind, region, "fetched", len(unit.rows),
                                                            fetched_at=unit.fetched_at))
                else:
                    self.report.results.append(SourceResult(cloud, kind, region, "kept" if m.fetched_at else "failed",
                                                            len(m.rows), m.age_s(), unit.error, m.fetched_at))

    def failed_regions(self, cloud: str, error: str) -> None:
        """The cloud's list of regions could not be read: no region is read again."""
        with self._lock:
            self.report.results.append(SourceResult(cloud, "regions", "global", "failed", error=error))

    def fetch(self, cloud: str, kind: str, region: str, read: Callable[[], cache.Unit]) -> None:
        self.record(cloud, kind, {region: read()})


def refresh_catalog(clouds=tuple(KINDS), regions: list[str] | None = None, *, max_age: dict | None = None,
                    aws=None, gcp=None, progress=None, deadline: str = COMMAND_DEADLINE) -> RefreshReport:
    """Fetch what is older than its lifetime (max_age: kind -> seconds; {} forces everything) from the
    clouds' APIs, every source in parallel, each within the deadline the setting `deadline` gives; then
    rebuild $DLRUN_HOME/catalog/offers.csv and the zone tables. A source that fails keeps its previous rows
    and says so; a cloud without credentials is skipped. aws, gcp: the clients to read with."""
    started = time.time()
    run = _Refresh(max_age, deadline)
    given = {"aws": aws, "gcp": gcp}
    reads: list[Read] = []
    for cloud, cloud_reads in CLOUD_READS.items():
        if cloud not in clouds:
            continue
        why = SOURCES[cloud].credentials()
        if why:
            run.report.skipped[cloud] = why
            continue
        reads += cloud_reads(run, given[cloud] or make_clients(cloud, deadline), regions, progress)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for f in [pool.submit(read) for read in reads]:
            f.result()
    rebuild_offers(run.report, regions)
    run.report.seconds = time.time() - started
    return run.report


def _aws_reads(run: _Refresh, aws, regions: list[str] | None, progress) -> list[Read]:
    """Per region (those asked for, else every region the account has enabled): _aws_region, and the
    region's on-demand prices beside it."""
    from infra.refresh import aws_prices
    from infra.refresh.answers import describe
    from infra.refresh.bounds import running

    try:
        with running(aws.deadline()):
            aws_regions = regions_for_aws(aws, regions)
    except Exception as e:  # noqa: BLE001 — describe_regions failed: no region to read
        run.failed_regions("aws", describe(e))
        return []
    if progress and aws_regions:
        progress(f"refreshing aws: {len(aws_regions)} regions (prices, spot, offerings, specs)")
    cached = {k: cache.load("aws", k) for k in KINDS["aws"]}
    reads: list[Read] = []
    for region in aws_regions:
        reads.append(partial(_aws_region, run, aws, region, cached))
        if run.due("aws", "ondemand", region, cached["ondemand"]):
            reads.append(partial(run.fetch, "aws", "ondemand", region, partial(aws_prices.read_ondemand, aws, region)))
    return reads


def _aws_region(run: _Refresh, aws, region: str, cached: dict[str, dict[str, cache.Unit]]) -> None:
    """A region's specs (read again when due), then the offerings and spot prices of the types they list."""
    from infra.refresh import aws_prices

    spec = cached["specs"].get(region)
    if run.due("aws", "specs", region, cached["specs"]):
        spec = aws_prices.read_specs(aws, region)
        run.record("aws", "specs", {region: spec})
        if spec.error:
            spec = cache.load("aws", "specs").get(region)
    types = sorted({t["type"] for t in (spec.rows if spec else [])})
    if not types:
        return
    if run.due("aws", "offerings", region, cached["offerings"]):
        run.record("aws", "offerings", {region: aws_prices.read_offerings(aws, region, set(types))})
    if run.due("aws", "spot", region, cached["spot"]):
        run.record("aws", "spot", {region: aws_prices.read_spot(aws, region, types)})


def _gcp_reads(run: _Refresh, gcp, regions: list[str] | None, progress) -> list[Read]:
    """Four global lists (the billing catalog answers every region at once); `regions` are AWS's."""
    from infra.refresh import gcp_prices

    if progress:
        progress("refreshing gcp: billing catalog SKUs, machine types, accelerator types, zones")
    sources = (("ondemand", "global", gcp_prices.read_skus), ("specs", "global", gcp_prices.read_machine_types),
               ("offerings", "global", gcp_prices.read_accelerators), ("specs", "zones", gcp_prices.read_zones))
    return [partial(run.fetch, "gcp", kind, region, partial(reader, gcp))
            for kind, region, reader in sources if run.due("gcp", kind, region)]


# per cloud (SOURCES' names, in their order): the reads a refresh of it makes
CLOUD_READS: dict[str, Callable[[_Refresh, Any, list[str] | None, Any], list[Read]]] = {
    "aws": _aws_reads, "gcp": _gcp_reads}


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
        report.regions = {c: len({r["region"] for r in rows if r["cloud"] == c}) for c in KINDS}
    return len(rows)
