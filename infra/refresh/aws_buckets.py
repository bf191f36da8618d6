"""Which EC2 vCPU quota an instance type counts against, in the words the quota readers need: a thin
view of infra/aws/quotas.py (the one table of buckets, owned by the AWS backend), so that quotas.py and
aws_quotas.py need not know its shape.
"""
from __future__ import annotations


def bucket_of(instance_type: str, spot: bool) -> tuple[str, str] | None:
    """(quota code, quota name) an instance type's vCPUs count against, or None when not known."""
    from infra.aws import quotas

    code = quotas.quota_code(instance_type, spot)
    return (code, quotas.quota_name(instance_type, spot)) if code else None


def tracked_codes() -> dict[str, tuple[str, str]]:
    """Every code dlrun reads -> (its name, market)."""
    from infra.aws import quotas

    out = {}
    for b in quotas.BUCKETS:
        out[b.on_demand] = (f"Running On-Demand {b.name} instances", "on-demand")
        out[b.spot] = (f"All {b.name} Spot Instance Requests", "spot")
    out[quotas.P5_SPOT] = ("All P5 Spot Instance Requests", "spot")
    return out


GPU_BUCKETS = ("G and VT", "P")  # the buckets of the families with NVIDIA GPUs (g4dn ... g6e, p3 ... p5)


def gpu_codes() -> frozenset[str]:
    """The codes of the vCPU quotas GPU instances draw on (on-demand and spot)."""
    from infra.aws import quotas

    codes = {c for b in quotas.BUCKETS if b.name in GPU_BUCKETS for c in (b.on_demand, b.spot)}
    return frozenset(codes | {quotas.P5_SPOT})
