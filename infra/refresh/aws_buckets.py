"""Which EC2 vCPU quota an instance type counts against: the instance class (the family's leading
letters) -> its bucket's Service Quotas codes, on-demand and spot apart (docs.aws.amazon.com/ec2/latest/
instancetypes/ec2-instance-quotas.html; /work/shared/notes/cloud-price-quota-apis.md).

A private copy of the table infra/aws/quotas.py (issue 24) owns. TODO(issue 25): use infra.aws.quotas
once it is on main, and remove this module.
"""
from __future__ import annotations

import re

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
