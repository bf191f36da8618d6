"""Which zones of a region a cluster can be launched in: EC2's available zones, and their account-independent
IDs (the spot ranking is per zone ID: infra/spot_zones.py). A subnet the user named narrows this to its zone
(provider.zones_for, infra/aws/vpc.py)."""
from __future__ import annotations


def zone_ids(ec2) -> dict[str, str]:
    """Zone name (us-east-1a, differs per account) -> zone ID (use1-az1, the same for everyone)."""
    return {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]
            if z.get("ZoneId")}


def available_zones(ec2) -> list[str]:
    zones = ec2.describe_availability_zones(
        Filters=[{"Name": "state", "Values": ["available"]}])["AvailabilityZones"]
    return sorted(z["ZoneName"] for z in zones if z.get("ZoneType", "availability-zone") == "availability-zone")
