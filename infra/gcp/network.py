"""dlrun's VPC network, its subnets, and the names and firewall rules of a GCP cluster.

Every cluster lives on one dedicated custom-mode network, `dlrun` (made on first use, reused, never
deleted by dlrun), with one subnet per region; never on `default`, which many organisations do not
have and whose built-in rules open SSH to the world and every port inside the project. The network
itself has no firewall rule of its own (GCE's implied rules deny all ingress); each cluster adds two
ingress rules on its own network tag: SSH from the caller's address only, and all traffic between the
cluster's members only (source tag = target tag). Ray's ports and the dashboard are never opened;
dlrun reaches them through an SSH tunnel.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
import zlib

from google.cloud import compute_v1


NAME_PREFIX = "dlrun-"
SSH_USER = "dlrun"
NETWORK = "dlrun"
NETWORK_DESCRIPTION = "dlrun: the network of dlrun's clusters (shared and reused; dlrun never deletes it)"
# one /20 per region, outside 10.128.0.0/9 (auto-mode networks' ranges, so `default` could be peered);
# regions not listed get a /20 of 10.64.0.0/10 picked by a hash of their name
SUBNET_RANGES = {"us-central1": "10.32.0.0/20", "us-west1": "10.32.16.0/20", "us-east1": "10.32.32.0/20",
                 "europe-west4": "10.32.48.0/20"}
_SLUG_MAX = 40  # leaves room for "dlrun-" and suffixes such as "-internal" within GCE's 63


def slug(cluster_id: str) -> str:
    """cluster_id as a GCE name part / label value; a hash keeps altered ids distinct."""
    s = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", cluster_id.lower())).strip("-")
    if s != cluster_id or len(s) > _SLUG_MAX:
        digest = hashlib.sha1(cluster_id.encode()).hexdigest()[:8]
        s = f"{s[:_SLUG_MAX - 9].rstrip('-')}-{digest}".lstrip("-")
    return s


def cluster_tag(cluster_id: str) -> str:
    """The network tag on every instance of the cluster (firewall rules target it)."""
    return NAME_PREFIX + slug(cluster_id)


def firewall_names(cluster_id: str) -> tuple[str, str]:
    base = cluster_tag(cluster_id)
    return f"{base}-ssh", f"{base}-internal"


def firewall_description(cluster_id: str) -> str:
    return f"dlrun cluster={cluster_id}"


def cluster_id_of_firewall(fw) -> str | None:
    m = re.match(r"^dlrun cluster=(.+)$", fw.description or "")
    return m.group(1) if m else None


def firewall_rules(cluster_id: str, ssh_cidr: str, network: str) -> list[compute_v1.Firewall]:
    tag = cluster_tag(cluster_id)
    ssh_name, internal_name = firewall_names(cluster_id)
    description = firewall_description(cluster_id)
    return [
        compute_v1.Firewall(
            name=ssh_name, network=network, direction="INGRESS", priority=1000,
            description=description, source_ranges=[ssh_cidr], target_tags=[tag],
            allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])]),
        compute_v1.Firewall(
            name=internal_name, network=network, direction="INGRESS", priority=1000,
            description=description, source_tags=[tag], target_tags=[tag],
            allowed=[compute_v1.Allowed(I_p_protocol=p) for p in ("tcp", "udp", "icmp")]),
    ]


def network_link(project: str) -> str:
    return f"projects/{project}/global/networks/{NETWORK}"


def subnetwork_name(region: str) -> str:
    return f"{NETWORK}-{region}"


def subnetwork_link(project: str, region: str) -> str:
    return f"projects/{project}/regions/{region}/subnetworks/{subnetwork_name(region)}"


def subnet_range(region: str) -> str:
    if region in SUBNET_RANGES:
        return SUBNET_RANGES[region]
    block = zlib.crc32(region.encode()) % 1024  # 1024 /20 blocks in 10.64.0.0/10
    return str(ipaddress.ip_network("10.64.0.0/20").network_address + block * 4096) + "/20"


def network_resource() -> compute_v1.Network:
    return compute_v1.Network(name=NETWORK, description=NETWORK_DESCRIPTION, auto_create_subnetworks=False,
                              routing_config=compute_v1.NetworkRoutingConfig(routing_mode="REGIONAL"))


def subnetwork_resource(project: str, region: str) -> compute_v1.Subnetwork:
    return compute_v1.Subnetwork(name=subnetwork_name(region), network=network_link(project), region=region,
                                 ip_cidr_range=subnet_range(region), description=NETWORK_DESCRIPTION)
