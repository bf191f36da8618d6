"""What dlrun reads from each cloud's own APIs, and how: one entry per cloud, keyed by its backend name
(infra/__init__.py BACKENDS), so that orchestrator/planning/catalog_refresh.py loops over clouds
without naming one. The readers' modules are imported only when a read is planned.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.refresh.cache import Unit
from infra.refresh.clients import (AwsClients, GcpClients, aws_credentials_configured,
                                   gcp_credentials_configured)
from infra.refresh.logins import Login, aws_login, gcp_login
from infra.refresh.quotas import GLOBAL, Quota

QuotaRead = Callable[[], dict[str, Unit]]   # one call to the cloud: region -> its quota unit


@dataclass(frozen=True)
class CloudSources:
    kinds: tuple[str, ...]                       # its kinds of price source (cache.py units)
    credentials: Callable[[], str | None]        # None when configured, else why not (no network)
    clients: Callable[..., Any]                  # the shared clients its readers take (deadline_s=)
    quota_units: frozenset[str]                  # units read besides a plan's regions
    quota_reads: Callable[[Any, list[str]], list[QuotaRead]]   # the calls that read these stale units
    regional_prices: bool                        # a price source per region, rather than one list
    login: Callable[[], Login]                   # where its credentials come from (no network)
    account: Callable[[Any, str], Any]           # (clients, region) -> accounts.Account: who, which regions
    gpu_quota: Callable[[Quota], bool]           # whether GPU offers draw on this quota


def _aws_account(clients, region: str):
    from infra.refresh.accounts import aws_account

    return aws_account(clients, region)


def _gcp_account(clients, region: str):
    from infra.refresh.accounts import gcp_account

    return gcp_account(clients)


def _aws_gpu_quota(q: Quota) -> bool:
    from infra.refresh.aws_buckets import gpu_codes

    return q.code in gpu_codes()


def _aws_quota_reads(clients, stale: list[str]) -> list[QuotaRead]:
    from infra.refresh import aws_quotas

    # Service Quotas and describe_instances answer per region: one call per region
    return [lambda r=r: {r: aws_quotas.read_region(clients, r)} for r in stale]


def _gcp_quota_reads(clients, stale: list[str]) -> list[QuotaRead]:
    from infra.refresh import gcp_quotas

    reads: list[QuotaRead] = []
    regional = [r for r in stale if r != GLOBAL]
    if regional:  # regions.list answers every region at once
        reads.append(lambda: gcp_quotas.read_regions(clients, regional))
    if GLOBAL in stale:
        reads.append(lambda: {GLOBAL: gcp_quotas.read_project(clients)})
    return reads


SOURCES: dict[str, CloudSources] = {
    "aws": CloudSources(kinds=("specs", "offerings", "ondemand", "spot"),
                        credentials=aws_credentials_configured, clients=AwsClients,
                        quota_units=frozenset(), quota_reads=_aws_quota_reads, regional_prices=True,
                        login=aws_login, account=_aws_account, gpu_quota=_aws_gpu_quota),
    # GCP's project-wide quotas (all GPUs, CPUs in all regions) are a unit of their own, always read
    "gcp": CloudSources(kinds=("specs", "offerings", "ondemand"),
                        credentials=gcp_credentials_configured, clients=GcpClients,
                        quota_units=frozenset({GLOBAL}), quota_reads=_gcp_quota_reads, regional_prices=False,
                        login=gcp_login, account=_gcp_account, gpu_quota=lambda q: q.unit == "GPU"),
}
SOURCE_CLOUDS: tuple[str, ...] = tuple(SOURCES)
