"""Names and firewall rules of a GCP cluster.

Each cluster gets two ingress rules on its own network tag: SSH from the caller's address only, and
all traffic between the cluster's members only (source tag = target tag). Ray's ports and the
dashboard are never opened; dlrun reaches them through an SSH tunnel.
"""
from __future__ import annotations

import hashlib
import re

from google.cloud import compute_v1


NAME_PREFIX = "dlrun-"
SSH_USER = "dlrun"
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
