"""AWS EC2 vCPU quotas per region: Service Quotas (applied values, else AWS's defaults) and what this
account's running instances already use of them.

Quota codes (ServiceCode "ec2", unit vCPU; docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html,
checked in /work/shared/notes/cloud-price-quota-apis.md): one bucket per instance class, on-demand and
spot apart. A new account has 0 for G and VT and for P, both markets.

`list_service_quotas` may leave out a quota whose applied value is not available; its default then comes
from `list_aws_default_service_quotas`. Usage is counted from `describe_instances` (pending and running
instances, vCPUs = cores x threads, spot when InstanceLifecycle is "spot"), the same count EC2 enforces.
Throttling (TooManyRequestsException) or a refused call makes the region's quotas unknown, never 0.

BUCKETS is a private copy of the family -> bucket table that infra/aws/quotas.py (issue 24) owns;
TODO(issue 25): use infra.aws.quotas once it is on main, and remove BUCKETS.
"""
from __future__ import annotations

import re
import time

from infra.refresh.cache import Unit
from infra.refresh.quotas import Quota

# bucket: (instance classes, on-demand code, on-demand name, spot code, spot name)
BUCKETS = {
    "standard": (("a", "c", "d", "h", "i", "im", "is", "m", "r", "t", "z"),
                 "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
                 "L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    "g": (("g", "vt"), "L-DB2E81BA", "Running On-Demand G and VT instances",
          "L-3819A6DF", "All G and VT Spot Instance Requests"),
    "p": (("p",), "L-417A185B", "Running On-Demand P instances",
          "L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
    "f": (("f",), "L-74FC7D96", "Running On-Demand F instances", "L-88CF9481", "All F Spot Instance Requests"),
    "x": (("x",), "L-7295265B", "Running On-Demand X instances", "L-E3A00192", "All X Spot Instance Requests"),
    "inf": (("inf",), "L-1945791B", "Running On-Demand Inf instances", "L-B5D1601B", "All Inf Spot Instance Requests"),
    "trn": (("trn",), "L-2C3B7624", "Running On-Demand Trn instances", "L-6B0D517C", "All Trn Spot Instance Requests"),
    "dl": (("dl",), "L-6E869C2A", "Running On-Demand DL instances", "L-85EED4F7", "All DL Spot Instance Requests"),
}
P5_SPOT = ("L-C4BD4855", "All P5 Spot Instance Requests")
_CLASS = {c: b for b, (classes, *_rest) in BUCKETS.items() for c in classes}
SOURCE = "servicequotas:ListServiceQuotas/ListAWSDefaultServiceQuotas + ec2:DescribeInstances"


def bucket_of(instance_type: str, spot: bool) -> tuple[str, str] | None:
    """(quota code, quota name) an instance type's vCPUs count against, or None when not known."""
    family = instance_type.split(".", 1)[0].lower()
    m = re.match(r"([a-z]+)(\d*)", family)
    if not m:
        return None
    letters, gen = m.group(1), int(m.group(2) or 0)
    bucket = _CLASS.get(letters)
    if bucket is None:
        return None
    _, od, od_name, sp, sp_name = BUCKETS[bucket]
    if not spot:
        return od, od_name
    if bucket == "p" and gen >= 5:
        return P5_SPOT if gen == 5 else None  # which spot bucket P6 uses is not documented [unverified]
    return sp, sp_name


def tracked_codes() -> dict[str, tuple[str, str]]:
    """Every code dlrun reads -> (its name, market)."""
    out = {}
    for _, od, od_name, sp, sp_name in BUCKETS.values():
        out[od] = (od_name, "on-demand")
        out[sp] = (sp_name, "spot")
    out[P5_SPOT[0]] = (P5_SPOT[1], "spot")
    return out


def _paged(client, op: str, key: str, **kw) -> list[dict]:
    items, token = [], None
    while True:
        page = getattr(client, op)(**kw, **({"NextToken": token} if token else {}))
        items += page.get(key, [])
        token = page.get("NextToken")
        if not token:
            return items


def usage_by_code(ec2) -> dict[str, float]:
    """vCPUs of this account's pending/running instances, per quota code."""
    used: dict[str, float] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    instances = [i for page in pages for res in page.get("Reservations", []) for i in res.get("Instances", [])]
    # CpuOptions is optional in the response: the type's default vCPUs where it is missing
    no_cpu = sorted({i["InstanceType"] for i in instances if not (i.get("CpuOptions") or {}).get("CoreCount")})
    default_vcpus = {}
    for itype in no_cpu:
        from botocore.exceptions import ClientError

        try:
            types = ec2.describe_instance_types(InstanceTypes=[itype])["InstanceTypes"]
        except ClientError:  # a type EC2 no longer describes: not counted
            continue
        default_vcpus.update({t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in types})
    for inst in instances:
        cpu = inst.get("CpuOptions") or {}
        vcpus = (cpu.get("CoreCount") or 0) * (cpu.get("ThreadsPerCore") or 1) \
            or default_vcpus.get(inst.get("InstanceType"), 0)
        bucket = bucket_of(inst.get("InstanceType", ""), inst.get("InstanceLifecycle") == "spot")
        if bucket and vcpus:
            used[bucket[0]] = used.get(bucket[0], 0.0) + vcpus
    return used


def read_region(clients, region: str) -> Unit:
    """The region's EC2 vCPU quotas with their usage; an error leaves the unit empty with the reason."""
    from botocore.exceptions import BotoCoreError, ClientError

    tried = time.time()
    wanted = tracked_codes()
    try:
        sq = clients.client("service-quotas", region)
        applied = {q["QuotaCode"]: q for q in _paged(sq, "list_service_quotas", "Quotas", ServiceCode="ec2")
                   if q.get("QuotaCode") in wanted}
        missing = set(wanted) - set(applied)
        defaults = {}
        if missing:
            defaults = {q["QuotaCode"]: q for q in _paged(sq, "list_aws_default_service_quotas", "Quotas",
                                                           ServiceCode="ec2") if q.get("QuotaCode") in missing}
        used = usage_by_code(clients.client("ec2", region))
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "error")
        why = "throttled" if code in ("TooManyRequestsException", "ThrottlingException", "RequestLimitExceeded") \
            else "refused" if code in ("AccessDeniedException", "UnauthorizedOperation", "AuthFailure",
                                       "UnrecognizedClientException", "InvalidClientTokenId") else "failed"
        return Unit("aws", "quotas", region, error=f"{why} ({code}): quotas unknown", tried_at=tried)
    except (BotoCoreError, NotImplementedError, OSError) as e:
        return Unit("aws", "quotas", region, error=f"failed ({type(e).__name__}): quotas unknown", tried_at=tried)
    rows = []
    for code, (name, market) in wanted.items():
        q = applied.get(code) or defaults.get(code)
        if q is None:
            continue
        value = q.get("Value")
        rows.append(Quota("aws", region, code, q.get("QuotaName") or name, "vCPU",
                          None if value is None else float(value), used.get(code, 0.0), market,
                          "ListServiceQuotas" if code in applied else "ListAWSDefaultServiceQuotas").__dict__)
    return Unit("aws", "quotas", region, fetched_at=time.time(), source=SOURCE, rows=rows, tried_at=tried)
