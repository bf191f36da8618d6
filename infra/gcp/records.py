"""Compute Engine instances -> dlrun records: a Cluster rebuilt from labelled instances, each node's state.

Everything needed to rebuild a Cluster lives in labels and metadata, so a cluster found again after
dlrun was killed (`dlrun down --orphans`) is as complete as the one launch() returned.
"""
from __future__ import annotations

import time
from datetime import datetime

from infra.base import TAG_OWNER, Cluster, Node, NodeState
from infra.gcp import network as net
from infra.gcp.compute import addresses_of, instance_names
from infra.vm.keys import key_path

PENDING_STATES = {"PROVISIONING", "STAGING", "REPAIRING"}


def cluster_from_instances(cluster_id: str, job_id: str, region: str, zone: str, instances: list, *,
                           project: str, spot: bool, price: float, instance_type: str) -> Cluster:
    head_name = instance_names(cluster_id, 1)[0]
    nodes = []
    for inst in sorted(instances, key=lambda i: (i.name != head_name, i.name)):
        private_ip, public_ip = addresses_of(inst)
        nodes.append(Node(node_id=inst.name, private_ip=private_ip, public_ip=public_ip, zone=zone,
                          is_head=inst.name == head_name))
    head = nodes[0] if nodes else None
    created = [t for i in instances if (t := _timestamp(getattr(i, "creation_timestamp", "")))]
    return Cluster(
        launched_at=min(created) if created else time.time(),
        cluster_id=cluster_id, provider="gcp", region=region, zone=zone, instance_type=instance_type,
        spot=spot, price_per_hour=price, nodes=nodes, job_id=job_id,
        head_address=f"ssh://{net.SSH_USER}@{head.public_ip or head.private_ip}" if head else "",
        ssh_user=net.SSH_USER, ssh_key_path=str(key_path(cluster_id)),
        extra={"project": project, "network_tag": net.cluster_tag(cluster_id),
               "owner": (instances[0].labels or {}).get(TAG_OWNER, "") if instances else "",
               "firewalls": list(net.firewall_names(cluster_id)),
               "node_account": next((a.email for i in instances for a in i.service_accounts), "")})


def with_accounts(clusters: list[Cluster], accounts: dict[str, dict], *, project: str) -> list[Cluster]:
    """Each node account (email: its description record) goes with its cluster, or is a leftover of its
    own: a launch that died after making the account and before its firewall rules and instances."""
    by_id = {c.cluster_id: c for c in clusters}
    for email, record in sorted(accounts.items()):
        cid = record["cluster"]
        if cid not in by_id:
            by_id[cid] = cluster_from_instances(cid, record.get("job", ""), record.get("region", ""), "", [],
                                                project=project, spot=False, price=0.0, instance_type="")
            by_id[cid].extra["owner"] = record.get("owner", "")
            clusters.append(by_id[cid])
        by_id[cid].extra["node_account"] = email
    return clusters


def _timestamp(rfc3339: str) -> float | None:
    try:
        return datetime.fromisoformat(rfc3339).timestamp() if rfc3339 else None
    except ValueError:
        return None


def node_state(name: str, inst, *, spot: bool, terminated_by_us: bool, preempted: set[str]) -> NodeState:
    """running/pending; preempted (spot reclaimed by GCP); terminated (by dlrun); gone (anything else)."""
    if inst is None:
        if terminated_by_us:
            return NodeState(name, "terminated", "deleted by dlrun")
        if name in preempted or spot:
            return NodeState(name, "preempted", "spot VM reclaimed by GCP (instance deleted)")
        return NodeState(name, "gone", "instance no longer exists")
    if inst.status == "RUNNING":
        return NodeState(name, "running")
    if inst.status in PENDING_STATES:
        return NodeState(name, "pending", inst.status)
    if name in preempted:
        return NodeState(name, "preempted", f"spot VM reclaimed by GCP ({inst.status})")
    return NodeState(name, "terminated", inst.status)
