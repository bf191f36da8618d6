"""The run_instances request for one role (head or workers) of a cluster, and reading instances back."""
from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from typing import Any

from infra.aws import network as net
from infra.aws.records import TAG_ROLE
from infra.base import TAG_CLUSTER, TAG_JOB, TAG_OWNER, ClusterRequest
from infra.vm.bootstrap import startup_script
from infra.vm.provider import Prepared

LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


@dataclass
class AwsPrepared(Prepared):
    """What every zone's run_instances of one launch shares (provider.prepare)."""

    ami: str = ""
    login_user: str = ""  # the SSH user of the AMI
    group_id: str = ""    # the cluster's security group
    key_name: str = ""    # the EC2 key pair: the cluster's own, or the user's (aws key_name)
    tags: dict[str, str] = field(default_factory=dict)  # every instance's tags
    profile: str = ""     # the node role's instance profile ("": no bucket, no credentials on the node)
    root: dict = field(default_factory=dict)  # the root volume's block device mapping ({}: the AMI's)


USER_DATA_LIMIT = 16 * 1024  # RunInstances: "limited to 16 KB", before base64


def user_data(script: str) -> str | bytes:
    """The boot script as EC2 takes it: as is when it fits, else gzip-compressed, which cloud-init detects by its
    magic bytes and decompresses before running the script (cloud-init docs, "User data formats": gzip)."""
    raw = script.encode()
    return script if len(raw) <= USER_DATA_LIMIT else gzip.compress(raw, mtime=0)


def run_params(request: ClusterRequest, prepared: AwsPrepared, *, zone: str, count: int, head_ip: str | None,
               subnet_id: str = "") -> dict:
    is_head = head_ip is None
    role = "head" if is_head else "worker"
    tags = prepared.tags
    params: dict[str, Any] = dict(
        ImageId=prepared.ami, InstanceType=request.offer.instance_type, MinCount=count, MaxCount=count,
        KeyName=prepared.key_name, SecurityGroupIds=[prepared.group_id], Placement={"AvailabilityZone": zone},
        UserData=user_data(startup_script(prepared.cfg, is_head=is_head, head_ip=head_ip,
                                          cluster_id=request.cluster_id, login_user=prepared.login_user)),
        InstanceInitiatedShutdownBehavior="terminate",
        TagSpecifications=[
            net.tag_spec("instance", {**tags, TAG_ROLE: role,
                                      "Name": f"{net.resource_name(request.cluster_id)}-{role}"}),
            net.tag_spec("volume", {k: tags[k] for k in (TAG_CLUSTER, TAG_JOB, TAG_OWNER)}),
        ],
    )
    if subnet_id:  # infra/aws/vpc.py's choice; without it EC2 needs a default VPC with a default subnet here
        params["SubnetId"] = subnet_id
    if prepared.root:  # the root volume, sized from the plan (images.root_volume)
        params["BlockDeviceMappings"] = [prepared.root]
    if prepared.profile:  # the node's only credentials: a role scoped to the run's bucket prefix
        params["IamInstanceProfile"] = {"Name": prepared.profile}
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
