"""The run_instances request for one role (head or workers) of a cluster, and reading instances back."""
from __future__ import annotations

from infra.aws import network as net
from infra.aws.records import TAG_ROLE
from infra.base import TAG_CLUSTER, TAG_JOB, TAG_OWNER, BootstrapConfig, ClusterRequest
from infra.vm.bootstrap import startup_script

LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


def run_params(request: ClusterRequest, *, ami: str, group_id: str, key_name: str, tags: dict[str, str],
               cfg: BootstrapConfig, zone: str, count: int, head_ip: str | None, login_user: str,
               profile: str = "", subnet_id: str = "", root: dict | None = None) -> dict:
    is_head = head_ip is None
    role = "head" if is_head else "worker"
    params = dict(
        ImageId=ami, InstanceType=request.offer.instance_type, MinCount=count, MaxCount=count,
        KeyName=key_name, SecurityGroupIds=[group_id], Placement={"AvailabilityZone": zone},
        UserData=startup_script(cfg, is_head=is_head, head_ip=head_ip, cluster_id=request.cluster_id,
                                login_user=login_user),
        InstanceInitiatedShutdownBehavior="terminate",
        TagSpecifications=[
            net.tag_spec("instance", {**tags, TAG_ROLE: role,
                                      "Name": f"{net.resource_name(request.cluster_id)}-{role}"}),
            net.tag_spec("volume", {k: tags[k] for k in (TAG_CLUSTER, TAG_JOB, TAG_OWNER)}),
        ],
    )
    if subnet_id:  # infra/aws/vpc.py's choice; without it EC2 needs a default VPC with a default subnet here
        params["SubnetId"] = subnet_id
    if root:  # the root volume, sized from the plan (images.root_volume)
        params["BlockDeviceMappings"] = [root]
    if profile:  # the node's only credentials: a role scoped to the run's bucket prefix
        params["IamInstanceProfile"] = {"Name": profile}
    if request.spot:
        params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
            "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    return params


def describe(ec2, filters: list[dict]) -> list[dict]:
    pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def by_ids(ec2, ids: list[str], states=None) -> list[dict]:
    filters = [{"Name": "instance-id", "Values": ids}]
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    return describe(ec2, filters) if ids else []


def of_cluster(ec2, cluster_id: str, states) -> list[dict]:
    return describe(ec2, [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_id]},
                          {"Name": "instance-state-name", "Values": list(states)}])


def zone_ids(ec2) -> dict[str, str]:
    """Zone name (us-east-1a, differs per account) -> zone ID (use1-az1, the same for everyone)."""
    return {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]
            if z.get("ZoneId")}


def available_zones(ec2) -> list[str]:
    zones = ec2.describe_availability_zones(
        Filters=[{"Name": "state", "Values": ["available"]}])["AvailabilityZones"]
    return sorted(z["ZoneName"] for z in zones if z.get("ZoneType", "availability-zone") == "availability-zone")
