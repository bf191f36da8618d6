"""AWS EC2 vCPU quotas per region: Service Quotas (applied values, else AWS's defaults) and what this
account's running instances already use of them.

Quota codes (ServiceCode "ec2", unit vCPU; docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html,
checked in /work/shared/notes/cloud-price-quota-apis.md): one bucket per instance class, on-demand and
spot apart. A new account has 0 for G and VT and for P, both markets.

`list_service_quotas` may leave out a quota whose applied value is not available; its default then comes
from `list_aws_default_service_quotas`. Usage is counted from `describe_instances` (pending and running
instances, vCPUs = cores x threads, spot when InstanceLifecycle is "spot"), the same count EC2 enforces.
Throttling (TooManyRequestsException), a refused call, or an answer that cannot be read or lacks its
Quotas/Reservations (botocore reads a cut-off JSON body as an answer without keys) makes the region's quotas
unknown (or keeps what was read before), never 0 and never AWS's defaults.

The family -> bucket table is infra/aws/quotas.py (through infra/refresh/aws_buckets.py).
"""
from __future__ import annotations

from infra.refresh.answers import ShapeError, need
from infra.refresh.aws_buckets import bucket_of, tracked_codes
from infra.refresh.bounds import read_unit
from infra.refresh.cache import Unit
from infra.refresh.quotas import Quota

SOURCE = "servicequotas:ListServiceQuotas/ListAWSDefaultServiceQuotas + ec2:DescribeInstances"


def _paged(client, op: str, key: str, **kw) -> list[dict]:
    what, items, token, seen = f"servicequotas:{op}", [], None, set()
    while True:
        page = getattr(client, op)(**kw, **({"NextToken": token} if token else {}))
        for q in need(page, key, list, what):
            need(q, "QuotaCode", str, what)
            if q.get("Value") is not None and not isinstance(q["Value"], (int, float)):
                raise ShapeError(f"{what} answered quota {q['QuotaCode']} with a Value that is not a number")
            items.append(q)
        token = page.get("NextToken")
        if not token:
            return items
        if token in seen:
            raise ShapeError(f"{what} answered the page token {token[:40]!r} a second time (the listing would "
                             "never end)")
        seen.add(token)


def usage_by_code(ec2) -> dict[str, float]:
    """vCPUs of this account's pending/running instances, per quota code."""
    used: dict[str, float] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    instances = [i for page in pages for res in need(page, "Reservations", list, "ec2:DescribeInstances")
                 for i in res.get("Instances", [])]
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
    return read_unit("aws", "quotas", region, SOURCE, clients.deadline(), lambda: _quotas(clients, region))


def _quotas(clients, region: str) -> list[dict]:
    wanted = tracked_codes()
    sq = clients.client("service-quotas", region)
    applied = {q["QuotaCode"]: q for q in _paged(sq, "list_service_quotas", "Quotas", ServiceCode="ec2")
               if q.get("QuotaCode") in wanted}
    missing = set(wanted) - set(applied)
    defaults = {}
    if missing:
        defaults = {q["QuotaCode"]: q for q in _paged(sq, "list_aws_default_service_quotas", "Quotas",
                                                       ServiceCode="ec2") if q.get("QuotaCode") in missing}
    used = usage_by_code(clients.client("ec2", region))
    rows = []
    for code, (name, market) in wanted.items():
        q = applied.get(code) or defaults.get(code)
        if q is None:
            continue
        value = q.get("Value")
        rows.append(Quota("aws", region, code, q.get("QuotaName") or name, "vCPU",
                          None if value is None else float(value), used.get(code, 0.0), market,
                          "ListServiceQuotas" if code in applied else "ListAWSDefaultServiceQuotas").__dict__)
    return rows
