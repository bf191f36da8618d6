"""EC2 descriptions -> dlrun records: a Cluster rebuilt from tagged instances, and each node's state.

Everything needed to rebuild a Cluster lives in tags, so a cluster found again after dlrun was
killed (`dlrun down --orphans`) is as complete as the one launch() returned.
"""
from __future__ import annotations

import time
from datetime import datetime

from infra.base import TAG_JOB, TAG_OWNER, Cluster, Node, NodeState
from infra.vm.keys import key_path

TAG_ROLE = "dlrun-role"          # head / worker
TAG_PRICE = "dlrun-price"        # per-node hourly price used at launch
TAG_SPOT = "dlrun-spot"
TAG_SSH_USER = "dlrun-ssh-user"
TAG_TERMINATING = "dlrun-terminating"  # set by us right before terminate: tells "we did it" from preemption

UP_STATES = ("pending", "running")
SPOT_INTERRUPTION = "Server.SpotInstanceTermination"


def tags_of(resource: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags") or []}


def node_state(node_id: str, inst: dict | None, *, spot: bool, terminated_by_us: bool) -> NodeState:
    """running/pending; preempted (spot reclaimed by AWS); terminated (by dlrun); gone (anything else)."""
    if inst is None:
        if terminated_by_us:
            return NodeState(node_id, "terminated", "terminated by dlrun")
        return NodeState(node_id, "preempted" if spot else "gone", "instance no longer exists")
    state = inst["State"]["Name"]
    if state in UP_STATES:
        return NodeState(node_id, state)
    reason = inst.get("StateReason", {}).get("Code", "") or inst.get("StateTransitionReason", "")
    if state in ("shutting-down", "terminated"):
        if terminated_by_us or TAG_TERMINATING in tags_of(inst):
            return NodeState(node_id, "terminated", "terminated by dlrun")
        # moto (and some real reclaims) report a spot reclaim as a plain shutdown: a spot node
        # that dlrun did not terminate counts as preempted
        if reason == SPOT_INTERRUPTION or spot or inst.get("InstanceLifecycle") == "spot":
            return NodeState(node_id, "preempted", reason or "spot instance reclaimed")
    return NodeState(node_id, "gone", f"{state}: {reason}".rstrip(": "))


def cluster_from_instances(region: str, cluster_id: str, instances: list[dict], *,
                           own_key_name: str | None = None, own_key_path: str | None = None) -> Cluster:
    """A Cluster rebuilt from what EC2 says (tags included): used after launch and for orphans."""
    def order(i):
        return (tags_of(i).get(TAG_ROLE) != "head", i.get("LaunchTime") or 0, i["InstanceId"])
    instances = sorted(instances, key=order)
    first = instances[0]
    head_tags = tags_of(first)
    nodes = [Node(node_id=i["InstanceId"], private_ip=i.get("PrivateIpAddress", ""),
                  public_ip=i.get("PublicIpAddress", ""),
                  zone=i.get("Placement", {}).get("AvailabilityZone", ""), is_head=(k == 0))
             for k, i in enumerate(instances)]
    head = nodes[0]
    ssh_user = head_tags.get(TAG_SSH_USER, "ubuntu")
    launched = first.get("LaunchTime")
    own_key = bool(own_key_name) and first.get("KeyName") == own_key_name
    return Cluster(
        cluster_id=cluster_id, provider="aws", region=region, zone=head.zone,
        instance_type=first.get("InstanceType", ""),
        spot=head_tags.get(TAG_SPOT) == "true" or first.get("InstanceLifecycle") == "spot",
        price_per_hour=float(head_tags.get(TAG_PRICE) or 0.0), nodes=nodes,
        job_id=head_tags.get(TAG_JOB, ""),
        launched_at=launched.timestamp() if isinstance(launched, datetime) else time.time(),
        # not an HTTP address: the runner reaches the head's Jobs API through infra.vm.ssh.open_tunnel
        head_address=f"ssh://{ssh_user}@{head.public_ip or head.private_ip}",
        ssh_user=ssh_user,
        ssh_key_path=(own_key_path or "") if own_key else str(key_path(cluster_id)),
        extra={"security_group_ids": sorted({g["GroupId"] for i in instances
                                             for g in i.get("SecurityGroups", [])}),
               "key_name": first.get("KeyName", ""), "ami": first.get("ImageId", ""),
               "owner": head_tags.get(TAG_OWNER, ""), "own_key": own_key,
               "node_role": first.get("IamInstanceProfile", {}).get("Arn", "").rsplit("/", 1)[-1]},
    )
