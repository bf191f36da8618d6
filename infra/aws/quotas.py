"""EC2's vCPU quotas: which quota an instance type draws on, on-demand and spot, and what to ask for.

EC2 counts running vCPUs per *bucket* of instance families, per region, on-demand and spot apart; a
`VcpuLimitExceeded` (on-demand) or `MaxSpotInstanceCountExceeded` (spot) answer means that one bucket is
full there, nothing more: a G-family refusal says nothing about c7i.large or about the next region.
This table is the one place dlrun knows the buckets (the run loop's QuotaScope, and later the planner's
quota pre-check, read it).

Sources (read 2026-11):
- On-demand buckets: the Service Quotas names "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
  instances", "... G and VT ...", "... P ...", "... F ...", "... Inf ...", "... Trn ...", "... DL ...",
  "... X ..." (docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html; codes as
  `aws service-quotas list-service-quotas --service-code ec2` lists them).
- Spot buckets: docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html ("All Standard (A, C,
  D, H, I, M, R, T, Z) Spot Instance Requests", "All G and VT ...", "All P ...", "All F ...", "All Inf
  ...", "All Trn ...", "All DL ...", "All X ..."); older revisions of that page list P5 apart ("All P5
  Spot Instance Requests", L-C4BD4855) from "All P4, P3 and P2" (L-7212CCBC).
- Codes and default values: /work/shared/notes/cloud-price-quota-apis.md (checked against SkyPilot's and
  dstack's gpuhunt fetchers). New accounts start at 5 standard vCPUs and 0 for every GPU bucket.
Not modelled: High Memory (U) and HPC buckets (a class missing here is scoped to its own letters), and
which spot bucket P6 uses [unverified].
"""
from __future__ import annotations

from dataclasses import dataclass

from infra.base import QuotaScope, instance_class


@dataclass(frozen=True)
class Bucket:
    name: str                     # as the Service Quotas console names the on-demand quota
    families: tuple[str, ...]     # instance classes (infra.base.instance_class) that draw on it
    on_demand: str                # Service Quotas code, on-demand
    spot: str                     # Service Quotas code, spot
    default_vcpus: int            # a new account's value (both markets)


BUCKETS: tuple[Bucket, ...] = (
    Bucket("Standard (A, C, D, H, I, M, R, T, Z)", ("a", "c", "d", "h", "i", "im", "is", "m", "r", "t", "z"),
           "L-1216C47A", "L-34B43A08", 5),
    Bucket("G and VT", ("g", "gr", "vt"), "L-DB2E81BA", "L-3819A6DF", 0),
    Bucket("P", ("p",), "L-417A185B", "L-7212CCBC", 0),
    Bucket("F", ("f",), "L-74FC7D96", "L-88CF9481", 0),
    Bucket("Inf", ("inf",), "L-1945791B", "L-B5D1601B", 0),
    Bucket("Trn", ("trn",), "L-2C3B7624", "L-6B0D517C", 0),
    Bucket("DL", ("dl",), "L-6E869C2A", "L-85EED4F7", 0),
    Bucket("X", ("x",), "L-7295265B", "L-E3A00192", 0),
)
P5_SPOT = "L-C4BD4855"  # "All P5 Spot Instance Requests", apart from L-7212CCBC in older docs

# the RunInstances error codes that mean "a quota is full"
# (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html)
VCPU_CODES = frozenset({"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded"})


def bucket_of(instance_type: str) -> Bucket | None:
    cls = instance_class(instance_type)
    return next((b for b in BUCKETS if cls in b.families), None)


def quota_code(instance_type: str, spot: bool) -> str:
    """The Service Quotas code this instance type draws on ("" when the table has no bucket for it)."""
    bucket = bucket_of(instance_type)
    if bucket is None:
        return ""
    if spot and instance_type.lower().startswith("p5"):
        return P5_SPOT
    return bucket.spot if spot else bucket.on_demand


def scope_for(instance_type: str, region: str, spot: bool) -> QuotaScope:
    """What one full quota rules out: every offer of the same bucket and market in this region."""
    bucket = bucket_of(instance_type)
    families = bucket.families if bucket else (instance_class(instance_type),)
    return QuotaScope(cloud="aws", region=region, market="spot" if spot else "on-demand", families=families,
                      quota=quota_code(instance_type, spot))


def quota_name(instance_type: str, spot: bool) -> str:
    bucket = bucket_of(instance_type)
    if bucket is None:
        return f"the vCPU quota of the {instance_class(instance_type).upper()} instances"
    if spot:
        return f"All {bucket.name} Spot Instance Requests"
    return f"Running On-Demand {bucket.name} instances"


def how_to_raise(instance_type: str, region: str, spot: bool, vcpus_needed: int = 0) -> str:
    """One sentence: which quota, where, and the command that asks for more."""
    code = quota_code(instance_type, spot)
    name = quota_name(instance_type, spot)
    want = f" to at least {vcpus_needed} vCPUs" if vcpus_needed else ""
    if not code:
        return (f"raise {name} in {region}{want} (Service Quotas console, "
                f"https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas?region={region})")
    value = vcpus_needed or "N"
    return (f"raise \"{name}\" ({code}) in {region}{want}: "
            f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
            f"--desired-value {value} --region {region}")
