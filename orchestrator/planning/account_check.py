"""`dlrun check`: which backends can run a job, as the clouds themselves answer.

Per cloud (infra/refresh/sources.py SOURCES): where the credentials come from (no call), then, when there
are some, who they are and which regions they reach (infra/refresh/accounts.py), and the GPU quotas in
the regions where the catalog has GPU offers (quota_book, read now: the same reads as `dlrun catalog quotas`).
This machine (the local backend) always runs jobs; a team cluster of config.yaml is asked what it has.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infra import BACKEND_NAMES, capabilities

if TYPE_CHECKING:
    from infra.refresh.accounts import Account
    from infra.refresh.logins import Login
    from infra.refresh.quotas import Quota


@dataclass
class CloudCheck:
    cloud: str
    login: Login
    account: Account | None = None            # None: not asked (no credentials)
    gpu_regions: list[str] = field(default_factory=list)   # reached regions with GPU offers in the catalog
    quotas: list[Quota] = field(default_factory=list)      # GPU quotas there (and project-wide)
    quota_errors: list[str] = field(default_factory=list)  # "region: why" for reads that failed
    raise_hint: str = ""

    @property
    def usable(self) -> bool:
        return self.login.usable and self.account is not None and not self.account.error

    @property
    def problem(self) -> str:
        """What keeps the cloud from running a job, and what fixes it ("" when usable)."""
        if not self.login.usable:
            return self.login.problem or ""
        if self.account is not None and self.account.error:
            return f"{self.account.error} ({self.login.source})"
        return ""

    @property
    def gpu_room(self) -> bool | None:
        """Whether a GPU quota has room in some region and none that spans every region is full (None when
        none was read)."""
        from infra.refresh.quotas import GLOBAL

        free = [(q.region, q.free) for q in self.quotas if q.free is not None]
        if any(region == GLOBAL and f <= 0 for region, f in free):
            return False
        return any(f > 0 for region, f in free if region != GLOBAL) if free else None


@dataclass
class OtherBackend:
    """The local backend or a team cluster: whether it runs jobs, in one line."""

    name: str
    usable: bool
    line: str
    counts: bool   # whether it counts for the exit code (the local backend is only noted)


@dataclass
class CheckReport:
    clouds: list[CloudCheck]
    others: list[OtherBackend]

    def usable(self) -> list[str]:
        return [c.cloud for c in self.clouds if c.usable] + [o.name for o in self.others if o.usable and o.counts]

    def to_json(self) -> dict[str, Any]:
        clouds = {}
        for c in self.clouds:
            a = c.account
            clouds[c.cloud] = {
                "usable": c.usable, "credentials": c.login.source or None, "profile_or_project": c.login.account
                or None, "default_region": c.login.region or None, "missing": c.problem or None,
                "fix": c.login.fix if not c.usable else None, "account": (a.details or None) if a else None,
                "identity": a.identity if a else None, "error": (a.error or None) if a else None,
                "regions": list(a.regions) if a else [], "regions_down": list(a.down) if a else [],
                "regions_error": (a.regions_error or None) if a else None,
                "gpu_regions": c.gpu_regions, "gpu_quotas": [q.__dict__ for q in c.quotas],
                "quota_errors": c.quota_errors}
        return {"usable": self.usable(), "clouds": clouds,
                "others": [{"backend": o.name, "usable": o.usable, "counts": o.counts, "note": o.line}
                           for o in self.others]}


def check_backends(names: list[str] | None = None, progress=None) -> CheckReport:
    """Check these backends (default: every one); the clouds' calls run one cloud after the other."""
    from infra.refresh.sources import SOURCES

    wanted = list(names or BACKEND_NAMES)
    clouds = [_check_cloud(c, progress) for c in SOURCES if c in wanted]
    others: list[OtherBackend] = []
    for name in wanted:
        if name in SOURCES:
            continue
        caps = capabilities(name)
        if not caps.remote:
            others.append(_local(name, counts=names is not None))
        elif not caps.provisioned:
            others += _team_clusters(name, asked=names is not None)
    return CheckReport(clouds, others)


def _check_cloud(cloud: str, progress) -> CloudCheck:
    from infra.refresh.quotas import raise_hint
    from infra.refresh.sources import SOURCES
    from orchestrator.planning.catalog_refresh import COMMAND_DEADLINE, make_clients

    source = SOURCES[cloud]
    login = source.login()
    result = CloudCheck(cloud, login, raise_hint=raise_hint(cloud))
    if not login.usable:
        return result
    if progress:
        progress(f"asking {cloud} who these credentials are, and its regions and GPU quotas")
    clients = make_clients(cloud, COMMAND_DEADLINE)
    account = result.account = source.account(clients, login.region)
    if account.error:
        return result
    offered = _gpu_offer_regions(cloud)  # the regions not listed: the catalog's, quotas read to see
    result.gpu_regions = sorted(set(account.regions) & offered if not account.regions_error else offered)
    _read_gpu_quotas(result, clients)
    return result


def _gpu_offer_regions(cloud: str) -> set[str]:
    from infra.catalog import load_offers

    return {o.region for o in load_offers() if o.cloud == cloud and o.accelerator}


def _read_gpu_quotas(result: CloudCheck, clients) -> None:
    from infra.refresh.quotas import GLOBAL
    from infra.refresh.sources import SOURCES
    from orchestrator.planning.catalog_refresh import COMMAND_DEADLINE, quota_book

    if not result.gpu_regions:
        return
    cloud, gpu = result.cloud, SOURCES[result.cloud].gpu_quota
    book = quota_book({cloud: set(result.gpu_regions)}, max_age_s=0, clients={cloud: clients},
                      deadline=COMMAND_DEADLINE)
    shown = set(result.gpu_regions) | {GLOBAL}
    result.quotas = sorted((q for q in book.all_quotas() if q.region in shown and gpu(q)),
                           key=lambda q: (q.region != GLOBAL, q.region, q.market, q.code))
    result.quota_errors = [f"{u.region or 'all regions'}: {u.error}" for u in book.units.values()
                           if u.error and u.region in shown]


def _local(name: str, counts: bool) -> OtherBackend:
    from infra.local.gpus import local_offers

    offers = local_offers()
    gpu = next((o for o in offers if o.accelerator), None)
    cpu = offers[-1]
    what = f"{gpu.accelerator_count}×{gpu.accelerator}" if gpu else "no GPU"
    return OtherBackend(name, True, f"this machine: {cpu.vcpus} CPUs, {cpu.memory_gb:g} GB, {what}; free, "
                        "no credentials needed", counts)


def _team_clusters(name: str, asked: bool) -> list[OtherBackend]:
    """Each configured team cluster, asked what it has now (a cluster that does not answer is not usable);
    none configured is said only when asked for."""
    from infra.base import ProviderError
    from infra.ray_cluster.resources import read_nodes
    from infra.ray_cluster.settings import ClusterConfigError, load_clusters

    try:
        clusters = load_clusters()
    except ClusterConfigError as e:
        return [OtherBackend(name, False, f"config.yaml: {e}", True)]
    if not clusters and asked:
        from infra.paths import dlrun_home

        return [OtherBackend(name, False, f"none configured: add one under clusters: in {dlrun_home() / 'config.yaml'}",
                             True)]
    out = []
    for s in clusters.values():
        try:
            nodes = read_nodes(s.address, s.headers(), backend=s.backend)
        except ProviderError as e:
            out.append(OtherBackend(s.backend, False, f"{s.address}: not reached: {e.message}", True))
            continue
        alive = len(nodes)
        out.append(OtherBackend(s.backend, True, f"{s.address}: {alive} node{'s' if alive != 1 else ''} "
                                "alive (`dlrun clusters` shows what is free)", True))
    return out
