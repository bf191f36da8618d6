"""Names, firewall rules, the caller's address and the SSH key of a GCP cluster.

Each cluster gets two ingress rules on its own network tag: SSH from the caller's address only, and
all traffic between the cluster's members only (source tag = target tag). Ray's ports and the
dashboard are never opened; dlrun reaches them through an SSH tunnel.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import urllib.request
from pathlib import Path

from google.cloud import compute_v1

from infra.base import ProvisionError
from infra.paths import keys_dir

NAME_PREFIX = "dlrun-"
SSH_USER = "dlrun"
CHECKIP_URLS = ("https://checkip.amazonaws.com", "https://api.ipify.org")
CHECKIP_TIMEOUT_S = 3.0
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


def checked_cidr(cidr: str) -> str:
    """A valid, non-world CIDR (a bare address becomes /32 or /128)."""
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError as e:
        raise ProvisionError(f"invalid SSH source address {cidr!r}: {e}", cloud="gcp") from None
    if net.prefixlen == 0:
        raise ProvisionError(f"refusing to open SSH to the whole internet ({cidr}); "
                             "give your own address, e.g. ssh_cidr: 203.0.113.7/32", cloud="gcp")
    return str(net)


def discover_caller_cidr(timeout: float = CHECKIP_TIMEOUT_S) -> str | None:
    """This machine's public address as /32 (or /128), or None when no lookup service answers."""
    for url in CHECKIP_URLS:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                address = ipaddress.ip_address(resp.read(100).decode("ascii", "replace").strip())
            return f"{address}/{address.max_prefixlen}"
        except (OSError, ValueError):
            continue
    return None


def firewall_rules(cluster_id: str, ssh_cidr: str, network: str) -> list[compute_v1.Firewall]:
    tag = cluster_tag(cluster_id)
    ssh_name, internal_name = firewall_names(cluster_id)
    description = firewall_description(cluster_id)
    return [
        compute_v1.Firewall(
            name=ssh_name, network=network, direction="INGRESS", priority=1000,
            description=description, source_ranges=[checked_cidr(ssh_cidr)], target_tags=[tag],
            allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])]),
        compute_v1.Firewall(
            name=internal_name, network=network, direction="INGRESS", priority=1000,
            description=description, source_tags=[tag], target_tags=[tag],
            allowed=[compute_v1.Allowed(I_p_protocol=p) for p in ("tcp", "udp", "icmp")]),
    ]


def key_path(cluster_id: str) -> Path:
    return keys_dir() / f"gcp-{slug(cluster_id)}"


def ensure_ssh_key(cluster_id: str) -> tuple[Path, str]:
    """(private key file, OpenSSH public key): a per-cluster ed25519 key, made once."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = key_path(cluster_id)
    if path.exists():
        key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
    else:
        key = Ed25519PrivateKey.generate()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                      serialization.NoEncryption()))
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    return path, f"{public} {SSH_USER}"


def remove_ssh_key(cluster_id: str) -> None:
    key_path(cluster_id).unlink(missing_ok=True)
