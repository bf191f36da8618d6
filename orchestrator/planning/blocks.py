"""Block keys: what the run loop rules out after a failure, one set of strings the planner reads.

    aws                           a whole cloud (credentials refused, a global quota, a failed preflight)
    aws/us-east-1                 one region (a regional quota, an on-demand loss)
    aws/us-east-1/g4dn.xlarge     one offer, both markets (Offer.key: no capacity, a failed launch)
    spot:aws/us-east-1/g4dn.xlarge   only the spot market of one offer (a preemption)
    quota:{...}                   the markets that draw on one exhausted quota (infra.base.QuotaScope)

Built and read here only: the run loop adds keys (for_error, lost_pool), the planner asks (excludes,
spot_blocked, quota_blocked).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, AbstractSet

from infra.base import ProviderError, QuotaError, QuotaScope

if TYPE_CHECKING:
    from infra.catalog import Offer

SPOT_PREFIX = "spot:"


def region_key(cloud: str, region: str) -> str:
    return f"{cloud}/{region}"


def spot_key(offer_key: str) -> str:
    """Blocks only the spot market of an offer (a preemption says nothing about on-demand capacity)."""
    return SPOT_PREFIX + offer_key


def for_error(offer: Offer, error: ProviderError) -> str:
    """What a provider error rules out, by its scope (ProviderError.scope)."""
    if isinstance(error, QuotaError) and error.scope == "quota" and error.quota is not None:
        return error.quota.key()
    if error.scope == "cloud":
        return offer.cloud
    if error.scope == "region":
        return region_key(offer.cloud, error.region or offer.region)
    return offer.key


def lost_pool(offer_key: str, spot: bool) -> str | None:
    """What a preemption rules out: the spot market of the offer, or the region of an on-demand loss."""
    if not offer_key:
        return None
    if spot:
        return spot_key(offer_key)
    cloud, region = offer_key.split("/")[:2]
    return region_key(cloud, region)


def excludes(offer: Offer, blocked: AbstractSet[str]) -> bool:
    """Both markets of the offer are out: its cloud, its region or the offer itself is blocked."""
    return bool(blocked) and (offer.cloud in blocked or region_key(offer.cloud, offer.region) in blocked
                              or offer.key in blocked)


def spot_blocked(offer: Offer, blocked: AbstractSet[str]) -> bool:
    return spot_key(offer.key) in blocked


def quota_blocked(offer: Offer, spot: bool, blocked: AbstractSet[str]) -> str | None:
    """Why a market of an offer is out after a quota error, or None."""
    for key in blocked:
        scope = QuotaScope.from_key(key)
        if scope is not None and scope.matches(offer, spot):
            where = scope.region or "all regions"
            return f"quota {scope.quota or 'exhausted'} ({where}) exhausted at launch"
    return None
